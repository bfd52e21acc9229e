//! The schema (RFC 4512 §4): attribute types, object classes, syntaxes and
//! matching rules, and the entry checks that use them.
//!
//! The built-in schema (`builtin.schema`, written from the RFCs) and the
//! operator's files named in `schema.files` are parsed by one parser
//! (`parse`) into one `Schema`, built once at start and installed as the
//! process-wide, read-only schema (`install`, `get`): every core reads it
//! without a lock, and nothing changes it while serving.
//!
//! - `parse`: RFC 4512 descriptions, OpenLDAP `.schema` files with
//!   `objectidentifier` macros, and the `olcAttributeTypes` LDIF form.
//! - `syntax`: the LDAP syntaxes and their value checks.
//! - `check`: the checks of add, modify and modify-DN.
//! - `subschema`: the `cn=Subschema` entry.

pub mod check;
mod desc;
pub mod parse;
pub mod subschema;
pub mod syntax;

use crate::matching::Rule;
use rustc_hash::FxHashMap;
use std::path::Path;
use std::sync::OnceLock;

/// The built-in schema text.
pub const BUILTIN: &str = include_str!("builtin.schema");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrUsage {
    UserApplications,
    DirectoryOperation,
    DistributedOperation,
    DsaOperation,
}

impl AttrUsage {
    pub fn is_operational(self) -> bool {
        self != AttrUsage::UserApplications
    }

    pub fn keyword(self) -> &'static str {
        match self {
            AttrUsage::UserApplications => "userApplications",
            AttrUsage::DirectoryOperation => "directoryOperation",
            AttrUsage::DistributedOperation => "distributedOperation",
            AttrUsage::DsaOperation => "dSAOperation",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassKind {
    Abstract,
    Structural,
    Auxiliary,
}

#[derive(Debug, Clone)]
pub struct AttributeType {
    pub oid: String,
    pub names: Vec<String>,
    /// The lower-case first name (or the OID): DN and index keys use it.
    pub key: String,
    pub desc: Option<String>,
    pub obsolete: bool,
    /// The supertype, by index into `Schema::attrs`.
    pub sup: Option<usize>,
    /// Matching rules and syntax, inherited from the supertype when absent.
    pub equality: Option<Rule>,
    pub ordering: Option<Rule>,
    pub substr: Option<Rule>,
    pub syntax: String,
    pub syntax_ref: &'static syntax::Syntax,
    pub syntax_len: Option<u32>,
    pub single_value: bool,
    pub collective: bool,
    pub no_user_modification: bool,
    pub usage: AttrUsage,
    /// The definition in RFC 4512 form, as published in `cn=Subschema`.
    pub definition: String,
}

impl AttributeType {
    /// The name entries store and return it under.
    pub fn name(&self) -> &str {
        self.names.first().map_or(&self.oid, String::as_str)
    }

    /// The rule an equality filter or a Compare uses: the type's equality
    /// rule, or for a DN without one (`namingContexts`) DN matching, as in
    /// slapd.
    pub fn equality_or_dn(&self) -> Option<Rule> {
        self.equality.or_else(|| (self.syntax == "1.3.6.1.4.1.1466.115.121.1.12").then_some(Rule::DistinguishedName))
    }
}

#[derive(Debug, Clone)]
pub struct ObjectClass {
    pub oid: String,
    pub names: Vec<String>,
    pub desc: Option<String>,
    pub obsolete: bool,
    pub sup: Vec<usize>,
    pub kind: ClassKind,
    /// Required and allowed attributes, by index into `Schema::attrs`,
    /// own ones only (`Schema::closure` adds the superclasses').
    pub must: Vec<usize>,
    pub may: Vec<usize>,
    pub definition: String,
}

impl ObjectClass {
    pub fn name(&self) -> &str {
        self.names.first().map_or(&self.oid, String::as_str)
    }
}

#[derive(Debug, Default)]
pub struct Schema {
    pub attrs: Vec<AttributeType>,
    pub classes: Vec<ObjectClass>,
    /// For each attribute type, itself and all its subtypes (filters on
    /// `name` match `cn` and `sn`).
    pub subtypes: Vec<Vec<usize>>,
    /// For each object class, itself and every class below it: an entry of
    /// class `inetOrgPerson` is also a `person` (RFC 4512 §2.4.1).
    pub subclasses: Vec<Vec<usize>>,
    // Looked up for every attribute of every entry a request touches:
    // FxHash, not SipHash (the keys are the schema's own names).
    attr_by_name: FxHashMap<String, usize>,
    class_by_name: FxHashMap<String, usize>,
    /// The shapes (first letter, length) of every operational type's names
    /// and OIDs: a name of no such shape is a user attribute without a
    /// lookup, which is most of the names a search returns.
    operational_shapes: [u64; 32],
}

/// Where `operational_shapes` keeps a name's (first letter, length).
fn shape(name: &str) -> (usize, u32) {
    let first = name.as_bytes().first().map_or(0, |b| (b.to_ascii_lowercase() & 31) as usize);
    (first, name.len().min(63) as u32)
}

/// The attribute type of a description: what precedes its options (`cn;lang-de`).
pub fn base_type(name: &str) -> &str {
    match name.as_bytes().iter().position(|b| *b == b';') {
        Some(at) => &name[..at],
        None => name,
    }
}

/// Lower-cases a short name into a stack buffer (names are looked up on
/// every request; this keeps the lookup allocation-free).
fn with_lower<R>(name: &str, f: impl FnOnce(&str) -> R) -> R {
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return f(name);
    }
    let mut buf = [0u8; 64];
    if name.len() <= buf.len() {
        let lower = &mut buf[..name.len()];
        lower.copy_from_slice(name.as_bytes());
        lower.make_ascii_lowercase();
        // SAFETY: ASCII lower-casing of valid UTF-8 only changes ASCII
        // bytes into ASCII bytes, so the buffer is still valid UTF-8.
        return f(unsafe { std::str::from_utf8_unchecked(lower) });
    }
    f(&name.to_ascii_lowercase())
}

impl Schema {
    /// The built-in schema alone.
    pub fn builtin() -> Schema {
        let mut b = parse::Builder::default();
        b.add_text("builtin.schema", BUILTIN).expect("the built-in schema is valid");
        b.build().expect("the built-in schema is consistent")
    }

    /// The built-in schema plus the operator's files, in order; the first
    /// bad definition is refused with `file:line: why`.
    pub fn load(files: &[impl AsRef<Path>]) -> Result<Schema, String> {
        let mut b = parse::Builder::default();
        b.add_text("builtin.schema", BUILTIN)?;
        for f in files {
            let path = f.as_ref();
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            b.add_text(&path.display().to_string(), &text)?;
        }
        b.build()
    }

    /// An attribute type by name, alias or OID; options (`;lang-de`) are ignored.
    pub fn attr(&self, name: &str) -> Option<&AttributeType> {
        self.attr_index(name).map(|i| &self.attrs[i])
    }

    /// Whether `name` is an operational attribute type (options ignored).
    pub fn is_operational(&self, name: &str) -> bool {
        let name = base_type(name);
        let (first, len) = shape(name);
        (self.operational_shapes[first] >> len) & 1 == 1 && self.attr(name).is_some_and(|at| at.usage.is_operational())
    }

    pub fn attr_index(&self, name: &str) -> Option<usize> {
        with_lower(base_type(name), |n| self.attr_by_name.get(n).copied())
    }

    pub fn class(&self, name: &str) -> Option<&ObjectClass> {
        self.class_index(name).map(|i| &self.classes[i])
    }

    pub fn class_index(&self, name: &str) -> Option<usize> {
        with_lower(name.trim(), |n| self.class_by_name.get(n).copied())
    }

    /// The OID a descriptor names (object class first, then attribute type).
    pub fn oid_of(&self, name: &str) -> Option<&str> {
        self.class(name).map(|c| c.oid.as_str()).or_else(|| self.attr(name).map(|a| a.oid.as_str()))
    }

    /// Whether attribute type `sub` is `sup` or one of its subtypes.
    pub fn is_subtype(&self, mut sub: usize, sup: usize) -> bool {
        loop {
            if sub == sup {
                return true;
            }
            match self.attrs[sub].sup {
                Some(s) => sub = s,
                None => return false,
            }
        }
    }

    /// Values as slapd stores them: object classes in the schema's
    /// spelling, DN-valued attributes (`member`, `owner`, the DN of a
    /// `uniqueMember`) in pretty form. Values that do not parse are kept
    /// for the schema check to refuse.
    pub fn spell_values(&self, name: &str, vals: &mut [Vec<u8>]) {
        const DN: &str = "1.3.6.1.4.1.1466.115.121.1.12";
        const NAME_AND_UID: &str = "1.3.6.1.4.1.1466.115.121.1.34";
        let Some(at) = self.attr(name.split(';').next().unwrap_or(name)) else { return };
        if at.oid == "2.5.4.0" {
            return self.spell_classes(vals);
        }
        let syntax = at.syntax_ref.oid;
        if syntax != DN && syntax != NAME_AND_UID {
            return;
        }
        for v in vals {
            let Ok(text) = std::str::from_utf8(v) else { continue };
            let (dn, uid) = match text.rfind("#'") {
                Some(at) if syntax == NAME_AND_UID => text.split_at(at),
                _ => (text, ""),
            };
            if let Ok(pretty) = crate::dn::Dn::parse(dn).and_then(|d| d.pretty()) {
                *v = format!("{pretty}{uid}").into_bytes();
            }
        }
    }

    /// Object class values as slapd stores them: in the schema's spelling
    /// (`groupofnames` → `groupOfNames`, an OID → its name); unknown
    /// values are kept for the schema check to refuse.
    pub fn spell_classes(&self, vals: &mut [Vec<u8>]) {
        for v in vals {
            let Some(c) = std::str::from_utf8(v).ok().and_then(|n| self.class_index(n)) else { continue };
            let name = self.classes[c].name();
            if name.as_bytes() != v.as_slice() {
                *v = name.as_bytes().to_vec();
            }
        }
    }

    /// Whether an entry of class `sub` is of class `sup`.
    pub fn is_subclass(&self, sub: usize, sup: usize) -> bool {
        self.subclasses[sup].contains(&sub)
    }

    /// A class and all its superclasses.
    pub fn closure(&self, class: usize, out: &mut Vec<usize>) {
        if out.contains(&class) {
            return;
        }
        out.push(class);
        for s in &self.classes[class].sup {
            self.closure(*s, out);
        }
    }

    pub(super) fn index_attr_names(&mut self) -> Result<(), String> {
        self.subtypes =
            (0..self.attrs.len()).map(|t| (0..self.attrs.len()).filter(|s| self.is_subtype(*s, t)).collect()).collect();
        for (i, at) in self.attrs.iter().enumerate() {
            for n in at.names.iter().chain(std::iter::once(&at.oid)) {
                if self.attr_by_name.insert(n.to_ascii_lowercase(), i).is_some() {
                    return Err(format!("attribute type name or OID '{n}' is defined twice"));
                }
                if at.usage.is_operational() {
                    let (first, len) = shape(n);
                    self.operational_shapes[first] |= 1 << len;
                }
            }
        }
        Ok(())
    }

    pub(super) fn index_class_names(&mut self) -> Result<(), String> {
        self.subclasses = (0..self.classes.len())
            .map(|c| {
                (0..self.classes.len())
                    .filter(|d| {
                        let mut chain = Vec::new();
                        self.closure(*d, &mut chain);
                        chain.contains(&c)
                    })
                    .collect()
            })
            .collect();
        for (i, oc) in self.classes.iter().enumerate() {
            for n in oc.names.iter().chain(std::iter::once(&oc.oid)) {
                if self.class_by_name.insert(n.to_ascii_lowercase(), i).is_some() {
                    return Err(format!("object class name or OID '{n}' is defined twice"));
                }
            }
        }
        Ok(())
    }
}

static SCHEMA: OnceLock<Schema> = OnceLock::new();

/// The process-wide schema: the installed one, or the built-in schema when
/// nothing was installed (tools and unit tests).
pub fn get() -> &'static Schema {
    SCHEMA.get_or_init(Schema::builtin)
}

/// Installs the schema for this process; must run before the first `get`.
pub fn install(schema: Schema) -> Result<(), String> {
    SCHEMA.set(schema).map_err(|_| "the schema was already in use when the configured one was installed".to_string())
}
