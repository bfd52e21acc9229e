//! Schema definitions in RFC 4512 description form, as found in OpenLDAP
//! `.schema` files (`attributetype`, `objectclass`, `objectidentifier`
//! macros) and in its LDIF form (`olcAttributeTypes`, `olcObjectClasses`,
//! `olcObjectIdentifier`, or `attributeTypes`/`objectClasses` as a
//! `cn=Subschema` dump has them). Every error names `file:line`.

use super::desc::{parse_desc, substitute, Desc, Kind};
use super::{syntax, AttrUsage, AttributeType, ClassKind, ObjectClass, Schema};
use crate::matching::{self, Rule, Usage};
use base64::Engine;
use std::collections::HashMap;

/// A definition waiting to be resolved, with where it came from.
struct Pending {
    at: String,
    desc: Desc,
}

/// Collects definitions from any number of files, then resolves them into
/// a `Schema`.
#[derive(Default)]
pub struct Builder {
    macros: HashMap<String, String>,
    /// `ldapsyntax` definitions: a syntax OID and the known syntax that
    /// stands in for it (`X-SUBST`).
    substitutes: HashMap<String, String>,
    attrs: Vec<Pending>,
    classes: Vec<Pending>,
}

impl Builder {
    /// Adds a file's definitions, in `.schema` or LDIF form.
    pub fn add_text(&mut self, file: &str, text: &str) -> Result<(), String> {
        let is_ldif = text.lines().any(|l| l.to_ascii_lowercase().starts_with("dn:"));
        let defs = if is_ldif { ldif_definitions(text) } else { schema_file_definitions(text) };
        for (line, keyword, body) in defs.map_err(|(line, why)| format!("{file}:{line}: {why}"))? {
            let at = format!("{file}:{line}: ");
            self.add(&at, &keyword, &body).map_err(|why| format!("{at}{why}"))?;
        }
        Ok(())
    }

    fn add(&mut self, at: &str, keyword: &str, body: &str) -> Result<(), String> {
        let at = at.to_string();
        match keyword.to_ascii_lowercase().as_str() {
            "objectidentifier" => {
                let mut parts = body.split_whitespace();
                let (Some(name), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                    return Err("objectidentifier takes a name and an OID".into());
                };
                let oid = self.expand(value)?;
                self.macros.insert(name.to_ascii_lowercase(), oid);
            }
            "attributetype" | "attributetypes" => {
                let mut desc = parse_desc(body, Kind::Attr)?;
                desc.oid = self.expand(&desc.oid)?;
                if let Some(syn) = desc.fields.iter_mut().find(|(k, _)| k == "SYNTAX") {
                    syn.1[0] = self.expand_syntax(&syn.1[0])?;
                    let (oid, len) = syn.1[0].split_at(syn.1[0].find('{').unwrap_or(syn.1[0].len()));
                    if let Some(stand_in) = self.substitutes.get(oid) {
                        syn.1[0] = format!("{stand_in}{len}");
                    }
                }
                push_unique(&mut self.attrs, Pending { at, desc }, Kind::Attr, &HashMap::new())?;
            }
            "objectclass" | "objectclasses" => {
                let mut desc = parse_desc(body, Kind::Class)?;
                desc.oid = self.expand(&desc.oid)?;
                let aliases = names_map(&self.attrs);
                let canonical: HashMap<String, String> =
                    aliases.iter().map(|(n, i)| (n.clone(), self.attrs[*i].desc.oid.clone())).collect();
                push_unique(&mut self.classes, Pending { at, desc }, Kind::Class, &canonical)?;
            }
            "ldapsyntax" | "ldapsyntaxes" => {
                let (oid, stand_in) = substitute(body)?;
                let oid = self.expand(&oid)?;
                if syntax::find(&stand_in).is_none() {
                    return Err(format!("ldapsyntax {oid}: X-SUBST names unknown syntax {stand_in}"));
                }
                self.substitutes.insert(oid, stand_in);
            }
            other => return Err(format!("unsupported schema statement '{other}'")),
        }
        Ok(())
    }

    /// Expands `macro` and `macro:suffix` into a numeric OID.
    fn expand(&self, text: &str) -> Result<String, String> {
        if matching::is_numeric_oid(text) {
            return Ok(text.to_string());
        }
        let (name, suffix) = match text.split_once(':') {
            Some((n, s)) => (n, Some(s)),
            None => (text, None),
        };
        let base = self
            .macros
            .get(&name.to_ascii_lowercase())
            .ok_or_else(|| format!("'{text}' is not a numeric OID and no objectidentifier defines '{name}'"))?;
        let oid = match suffix {
            Some(s) => format!("{base}.{s}"),
            None => base.clone(),
        };
        if !matching::is_numeric_oid(&oid) {
            return Err(format!("'{text}' expands to '{oid}', which is not a numeric OID"));
        }
        Ok(oid)
    }

    fn expand_syntax(&self, text: &str) -> Result<String, String> {
        let (oid, len) = match text.find('{') {
            Some(at) => text.split_at(at),
            None => (text, ""),
        };
        Ok(format!("{}{len}", self.expand(oid)?))
    }

    pub fn build(self) -> Result<Schema, String> {
        let mut schema = Schema::default();
        let attr_names = names_map(&self.attrs);
        let mut order = Vec::new();
        let mut state = vec![0u8; self.attrs.len()];
        for i in 0..self.attrs.len() {
            visit_attr(i, &self.attrs, &attr_names, &mut state, &mut order)?;
        }
        // Supertypes come first in `order`, so inherited fields are resolved.
        let mut slots: Vec<Option<AttributeType>> = vec![None; self.attrs.len()];
        for i in order {
            let at = resolve_attr(&self.attrs[i].desc, &attr_names, &slots).map_err(|e| annotate(&self.attrs[i], e))?;
            slots[i] = Some(at);
        }
        schema.attrs = slots.into_iter().map(|a| a.expect("every type resolved")).collect();
        schema.index_attr_names()?;
        let class_names = names_map(&self.classes);
        for p in &self.classes {
            let oc = resolve_class(&p.desc, &class_names, &schema).map_err(|e| annotate(p, e))?;
            schema.classes.push(oc);
        }
        schema.index_class_names()?;
        Ok(schema)
    }
}

/// Adds a definition unless one with its OID or a name of it exists: a
/// definition that says the same (`same_definition`) is accepted and
/// skipped, so OpenLDAP's stock `core.schema` loads over the built-in
/// schema; any other is refused, naming both places.
fn push_unique(
    defs: &mut Vec<Pending>,
    new: Pending,
    kind: Kind,
    attr_oids: &HashMap<String, String>,
) -> Result<(), String> {
    let names = |d: &Desc| -> Vec<String> {
        d.get("NAME").unwrap_or_default().iter().map(|n| n.to_ascii_lowercase()).collect()
    };
    let new_names = names(&new.desc);
    let clash =
        defs.iter().find(|old| old.desc.oid == new.desc.oid || names(&old.desc).iter().any(|n| new_names.contains(n)));
    let Some(old) = clash else {
        defs.push(new);
        return Ok(());
    };
    if same_definition(&old.desc, &new.desc, kind, attr_oids) {
        return Ok(());
    }
    let what = if kind == Kind::Attr { "attribute type" } else { "object class" };
    let name = new_names.first().cloned().unwrap_or_else(|| new.desc.oid.clone());
    Err(format!("{what} {name} ({}) conflicts with the definition at {}", new.desc.oid, old.at.trim_end_matches(": ")))
}

/// Whether two definitions mean the same: OID, names, and every field but
/// the description and `X-` extensions, lists compared as sets without
/// case and attribute names by their OIDs (`cn` is `commonName`). A
/// SYNTAX's `{length}` bound is advisory and ignored.
fn same_definition(a: &Desc, b: &Desc, kind: Kind, attr_oids: &HashMap<String, String>) -> bool {
    let norm = |d: &Desc| -> Vec<(String, Vec<String>)> {
        let mut fields: Vec<(String, Vec<String>)> = d
            .fields
            .iter()
            .filter(|(k, _)| k != "DESC" && !k.starts_with("X-"))
            .map(|(k, v)| {
                let mut v: Vec<String> = v.iter().map(|x| x.to_ascii_lowercase()).collect();
                if k == "MUST" || k == "MAY" {
                    v = v.iter().map(|x| attr_oids.get(x).cloned().unwrap_or_else(|| x.clone())).collect();
                    v.sort();
                    v.dedup();
                }
                if k == "SYNTAX" {
                    v = v.iter().map(|x| x.split('{').next().unwrap_or(x).to_string()).collect();
                }
                if k != "NAME" {
                    v.sort();
                }
                (k.clone(), v)
            })
            .collect();
        // A class without a kind is STRUCTURAL (RFC 4512 §4.1.1).
        if kind == Kind::Class
            && !fields.iter().any(|(k, _)| matches!(k.as_str(), "ABSTRACT" | "STRUCTURAL" | "AUXILIARY"))
        {
            fields.push(("STRUCTURAL".into(), Vec::new()));
        }
        fields.sort();
        fields
    };
    a.oid == b.oid && norm(a) == norm(b)
}

fn annotate(p: &Pending, e: String) -> String {
    let name = p.desc.get("NAME").and_then(|n| n.first()).cloned().unwrap_or_else(|| p.desc.oid.clone());
    format!("{}{name}: {e}", p.at)
}

fn names_map(defs: &[Pending]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (i, p) in defs.iter().enumerate() {
        m.insert(p.desc.oid.to_ascii_lowercase(), i);
        for n in p.desc.get("NAME").unwrap_or_default() {
            m.insert(n.to_ascii_lowercase(), i);
        }
    }
    m
}

fn visit_attr(
    i: usize,
    defs: &[Pending],
    names: &HashMap<String, usize>,
    state: &mut [u8],
    order: &mut Vec<usize>,
) -> Result<(), String> {
    match state[i] {
        2 => return Ok(()),
        1 => return Err(annotate(&defs[i], "its SUP chain loops back to itself".into())),
        _ => {}
    }
    state[i] = 1;
    if let Some(sup) = defs[i].desc.one("SUP") {
        let s = *names
            .get(&sup.to_ascii_lowercase())
            .ok_or_else(|| annotate(&defs[i], format!("unknown supertype '{sup}'")))?;
        visit_attr(s, defs, names, state, order)?;
    }
    state[i] = 2;
    order.push(i);
    Ok(())
}

fn rule(desc: &Desc, key: &str, usage: Usage) -> Result<Option<Rule>, String> {
    let Some(name) = desc.one(key) else { return Ok(None) };
    let info = matching::rule_named(name).ok_or_else(|| format!("unknown matching rule '{name}' in {key}"))?;
    if info.usage != usage {
        return Err(format!("'{name}' cannot be used as {key}"));
    }
    Ok(Some(info.rule))
}

fn resolve_attr(
    desc: &Desc,
    names: &HashMap<String, usize>,
    done: &[Option<AttributeType>],
) -> Result<AttributeType, String> {
    let sup = desc.one("SUP").map(|s| names[&s.to_ascii_lowercase()]);
    let parent = sup.map(|s| done[s].as_ref().expect("supertypes resolve first"));
    let (syntax, syntax_len) = match desc.one("SYNTAX") {
        Some(s) => {
            let (oid, len) = match s.split_once('{') {
                Some((o, l)) => {
                    let len = l.strip_suffix('}').and_then(|l| l.parse().ok()).ok_or("bad {length} in SYNTAX")?;
                    (o.to_string(), Some(len))
                }
                None => (s.to_string(), None),
            };
            if syntax::find(&oid).is_none() {
                return Err(format!("unknown syntax {oid}"));
            }
            (oid, len)
        }
        None => match parent {
            Some(p) => (p.syntax.clone(), p.syntax_len),
            None => return Err("needs a SYNTAX or a SUP to inherit one from".into()),
        },
    };
    let usage = match desc.one("USAGE") {
        None => AttrUsage::UserApplications,
        Some(u) => match u.to_ascii_lowercase().as_str() {
            "userapplications" => AttrUsage::UserApplications,
            "directoryoperation" => AttrUsage::DirectoryOperation,
            "distributedoperation" => AttrUsage::DistributedOperation,
            "dsaoperation" => AttrUsage::DsaOperation,
            _ => return Err(format!("unknown USAGE '{u}'")),
        },
    };
    let no_user_modification = desc.flag("NO-USER-MODIFICATION");
    if no_user_modification && usage == AttrUsage::UserApplications {
        return Err("NO-USER-MODIFICATION requires an operational USAGE".into());
    }
    let names: Vec<String> = desc.get("NAME").unwrap_or_default().to_vec();
    for n in &names {
        if !matching::is_descriptor(n) {
            return Err(format!("'{n}' is not a valid attribute name"));
        }
    }
    let inherit = |own: Option<Rule>, f: fn(&AttributeType) -> Option<Rule>| own.or_else(|| parent.and_then(f));
    let mut at = AttributeType {
        key: names.first().unwrap_or(&desc.oid).to_ascii_lowercase(),
        oid: desc.oid.clone(),
        names,
        desc: desc.one("DESC").map(str::to_string),
        obsolete: desc.flag("OBSOLETE"),
        sup,
        equality: inherit(rule(desc, "EQUALITY", Usage::Equality)?, |p| p.equality),
        ordering: inherit(rule(desc, "ORDERING", Usage::Ordering)?, |p| p.ordering),
        substr: inherit(rule(desc, "SUBSTR", Usage::Substrings)?, |p| p.substr),
        syntax_ref: syntax::find(&syntax).expect("checked above"),
        syntax,
        syntax_len,
        single_value: desc.flag("SINGLE-VALUE"),
        collective: desc.flag("COLLECTIVE"),
        no_user_modification,
        usage,
        definition: String::new(),
    };
    // slapd matches objectClass and structuralObjectClass by class (a
    // name and its OID are one value), and its ppolicy overlay reads
    // pwdAttribute's values as attribute types (`pwdAttribute:
    // userPassword`); other OID-syntax types by OID.
    let by_name = ["2.5.4.0", "2.5.21.9", "1.3.6.1.4.1.42.2.27.8.1.1"];
    if by_name.contains(&at.oid.as_str()) && at.equality == Some(Rule::ObjectIdentifier) {
        at.equality = Some(Rule::ObjectClass);
    }
    at.definition = render_attr(desc, &at, parent);
    Ok(at)
}

fn render_attr(desc: &Desc, at: &AttributeType, parent: Option<&AttributeType>) -> String {
    let mut s = format!("( {}", at.oid);
    push_names(&mut s, &at.names);
    if let Some(d) = &at.desc {
        s.push_str(&format!(" DESC '{}'", quote(d)));
    }
    if at.obsolete {
        s.push_str(" OBSOLETE");
    }
    if let Some(p) = parent {
        s.push_str(&format!(" SUP {}", p.name()));
    }
    for (key, usage) in [("EQUALITY", Usage::Equality), ("ORDERING", Usage::Ordering), ("SUBSTR", Usage::Substrings)] {
        if let Ok(Some(r)) = rule(desc, key, usage) {
            s.push_str(&format!(" {key} {}", r.info().name));
        }
    }
    if desc.one("SYNTAX").is_some() {
        s.push_str(&format!(" SYNTAX {}", at.syntax));
        if let Some(l) = at.syntax_len {
            s.push_str(&format!("{{{l}}}"));
        }
    }
    for (flag, on) in [
        ("SINGLE-VALUE", at.single_value),
        ("COLLECTIVE", at.collective),
        ("NO-USER-MODIFICATION", at.no_user_modification),
    ] {
        if on {
            s.push(' ');
            s.push_str(flag);
        }
    }
    if at.usage != AttrUsage::UserApplications {
        s.push_str(&format!(" USAGE {}", at.usage.keyword()));
    }
    push_extensions(&mut s, desc);
    s.push_str(" )");
    s
}

fn resolve_class(desc: &Desc, names: &HashMap<String, usize>, schema: &Schema) -> Result<ObjectClass, String> {
    let mut sup = Vec::new();
    for s in desc.get("SUP").unwrap_or_default() {
        sup.push(*names.get(&s.to_ascii_lowercase()).ok_or_else(|| format!("unknown superclass '{s}'"))?);
    }
    let kinds =
        [("ABSTRACT", ClassKind::Abstract), ("STRUCTURAL", ClassKind::Structural), ("AUXILIARY", ClassKind::Auxiliary)];
    let given: Vec<ClassKind> = kinds.iter().filter(|(k, _)| desc.flag(k)).map(|(_, v)| *v).collect();
    let kind = match given.as_slice() {
        [] => ClassKind::Structural,
        [k] => *k,
        _ => return Err("a class is only one of ABSTRACT, STRUCTURAL, AUXILIARY".into()),
    };
    let attrs = |key: &str| -> Result<Vec<usize>, String> {
        desc.get(key)
            .unwrap_or_default()
            .iter()
            .map(|a| schema.attr_index(a).ok_or_else(|| format!("{key} names unknown attribute type '{a}'")))
            .collect()
    };
    let must = attrs("MUST")?;
    let may = attrs("MAY")?;
    let names_v: Vec<String> = desc.get("NAME").unwrap_or_default().to_vec();
    let mut s = format!("( {}", desc.oid);
    push_names(&mut s, &names_v);
    if let Some(d) = desc.one("DESC") {
        s.push_str(&format!(" DESC '{}'", quote(d)));
    }
    if desc.flag("OBSOLETE") {
        s.push_str(" OBSOLETE");
    }
    push_oids(&mut s, "SUP", desc.get("SUP").unwrap_or_default());
    s.push_str(match kind {
        ClassKind::Abstract => " ABSTRACT",
        ClassKind::Structural => " STRUCTURAL",
        ClassKind::Auxiliary => " AUXILIARY",
    });
    let attr_names = |v: &[usize]| v.iter().map(|i| schema.attrs[*i].name().to_string()).collect::<Vec<_>>();
    push_oids(&mut s, "MUST", &attr_names(&must));
    push_oids(&mut s, "MAY", &attr_names(&may));
    push_extensions(&mut s, desc);
    s.push_str(" )");
    Ok(ObjectClass {
        oid: desc.oid.clone(),
        names: names_v,
        desc: desc.one("DESC").map(str::to_string),
        obsolete: desc.flag("OBSOLETE"),
        sup,
        kind,
        must,
        may,
        definition: s,
    })
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\5C").replace('\'', "\\27")
}

fn push_names(s: &mut String, names: &[String]) {
    match names {
        [] => {}
        [one] => s.push_str(&format!(" NAME '{one}'")),
        many => {
            s.push_str(" NAME (");
            for n in many {
                s.push_str(&format!(" '{n}'"));
            }
            s.push_str(" )");
        }
    }
}

fn push_oids(s: &mut String, key: &str, oids: &[String]) {
    match oids {
        [] => {}
        [one] => s.push_str(&format!(" {key} {one}")),
        many => s.push_str(&format!(" {key} ( {} )", many.join(" $ "))),
    }
}

fn push_extensions(s: &mut String, desc: &Desc) {
    for (k, vals) in desc.fields.iter().filter(|(k, _)| k.starts_with("X-")) {
        let quoted: Vec<String> = vals.iter().map(|v| format!("'{}'", quote(v))).collect();
        match quoted.as_slice() {
            [one] => s.push_str(&format!(" {k} {one}")),
            many => s.push_str(&format!(" {k} ( {} )", many.join(" "))),
        }
    }
}

type Defs = Result<Vec<(usize, String, String)>, (usize, String)>;

/// `.schema` syntax: a statement starts at the beginning of a line and
/// continues on lines that start with white space; `#` starts a comment line.
fn schema_file_definitions(text: &str) -> Defs {
    let mut out: Vec<(usize, String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            match out.last_mut() {
                Some(last) => {
                    last.2.push(' ');
                    last.2.push_str(line.trim());
                }
                None => return Err((line_no, "continuation line before any statement".into())),
            }
            continue;
        }
        let (keyword, rest) = line.trim().split_once(char::is_whitespace).unwrap_or((line.trim(), ""));
        out.push((line_no, keyword.to_string(), rest.trim().to_string()));
    }
    Ok(out)
}

/// LDIF form: the values of `olcAttributeTypes`, `olcObjectClasses` and
/// `olcObjectIdentifier` (with their `{N}` order prefixes), folded lines
/// and base64 values included.
fn ldif_definitions(text: &str) -> Defs {
    let mut logical: Vec<(usize, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(cont) = line.strip_prefix(' ') {
            if let Some(last) = logical.last_mut() {
                last.1.push_str(cont);
                continue;
            }
        }
        logical.push((n + 1, line.to_string()));
    }
    let mut out = Vec::new();
    for (line_no, line) in logical {
        let Some((name, rest)) = line.split_once(':') else { continue };
        let keyword = match name.to_ascii_lowercase().as_str() {
            "olcattributetypes" | "attributetypes" => "attributetype",
            "olcobjectclasses" | "objectclasses" => "objectclass",
            "olcobjectidentifier" => "objectidentifier",
            _ => continue,
        };
        let value = match rest.strip_prefix(':') {
            Some(b64) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| (line_no, format!("bad base64 value: {e}")))?;
                String::from_utf8(bytes).map_err(|_| (line_no, "value is not UTF-8".to_string()))?
            }
            None => rest.trim().to_string(),
        };
        let value = match value.strip_prefix('{').and_then(|v| v.split_once('}')) {
            Some((n, v)) if n.bytes().all(|b| b.is_ascii_digit()) => v.trim().to_string(),
            _ => value,
        };
        out.push((line_no, keyword.to_string(), value));
    }
    Ok(out)
}
#[cfg(test)]
mod tests;
