//! Compiles rules written as slapd writes them (`access to ... by ...`,
//! `olcAccess: {0}to ...`), so existing rules can be pasted unchanged.
//!
//! Supported: `<what>` = `*`, `dn[.base|exact|one|onelevel|sub|subtree|
//! children|regex]=`, `filter=`, `attrs=` (types, `entry`, `children`);
//! `<who>` = `*`, `anonymous`, `users`, `self`, `dn.<style>=`,
//! `group[/class[/attr]]=`, `ssf=`, `tls_ssf=`, `transport_ssf=` (several
//! in one clause must all match); levels by name; controls `stop`,
//! `continue`, `break`. Anything else is refused with the rule's number
//! and the word that is not understood, never ignored. A bare `dn=` is a
//! regular expression, as in slapd; patterns are matched case-insensitively
//! anywhere in the normalized DN (unanchored, as regexec(3)).

use super::{Acl, AttrList, By, Control, DnPattern, Level, Privs, Rule, What, Who};
use regex::RegexBuilder;
use shards::dn::Dn;
use shards::filter::{self, Names};

/// Compiles a rule list; errors name the rule (from 0, as slapd's `{N}`).
pub fn compile(rules: &[String]) -> Result<Acl, String> {
    // At configuration time only, never per request.
    static COMPILED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut acl = Acl { id: COMPILED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, ..Acl::default() };
    for (i, text) in rules.iter().enumerate() {
        let rule = rule(&mut acl, text).map_err(|e| format!("access rule {i} ({text:?}): {e}"))?;
        acl.rules.push(rule);
    }
    Ok(acl)
}

/// Compiles `limits.by_identity`: `<who> [size=N|unlimited] [time=N|unlimited]`.
pub fn compile_limits(acl: &mut Acl, rules: &[String]) -> Result<(), String> {
    for (i, text) in rules.iter().enumerate() {
        let limit = limit_rule(acl, text).map_err(|e| format!("limits.by_identity {i} ({text:?}): {e}"))?;
        acl.limits.push(limit);
    }
    Ok(())
}

/// Compiles `monitor.readers`: one `<who>` clause each.
pub fn compile_monitor_readers(acl: &mut Acl, readers: &[String]) -> Result<(), String> {
    for (i, text) in readers.iter().enumerate() {
        let who = tokenize(text)?.iter().map(|t| who_part(acl, t)).collect::<Result<Vec<_>, _>>();
        acl.monitor_readers.push(who.map_err(|e| format!("{i} ({text:?}): {e}"))?);
    }
    Ok(())
}

fn limit_rule(acl: &mut Acl, text: &str) -> Result<super::LimitRule, String> {
    let mut rule = super::LimitRule { who: Vec::new(), size: None, time_s: None };
    for t in tokenize(text)? {
        let value = |v: &str| match v {
            "unlimited" => Ok(0),
            n => n
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{t:?}: expected a positive number or 'unlimited'")),
        };
        if let Some(v) = t.strip_prefix("size=") {
            rule.size = Some(value(v)? as usize);
        } else if let Some(v) = t.strip_prefix("time=") {
            rule.time_s = Some(value(v)?);
        } else if t.starts_with("size.") || t.starts_with("time.") {
            return Err(format!("{t:?}: only size= and time= are supported"));
        } else {
            rule.who.push(who_part(acl, &t)?);
        }
    }
    if rule.who.is_empty() {
        return Err("names nobody (anonymous, users, dn.<style>=, group=, *)".into());
    }
    if rule.size.is_none() && rule.time_s.is_none() {
        return Err("sets neither size= nor time=".into());
    }
    Ok(rule)
}

fn rule(acl: &mut Acl, text: &str) -> Result<Rule, String> {
    // `{N}` from an olcAccess value and a leading `access` are accepted.
    let body = match text.trim_start().strip_prefix('{').and_then(|t| t.split_once('}')) {
        Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
        _ => text,
    };
    let tokens = tokenize(body)?;
    let mut it = tokens.iter().map(String::as_str).peekable();
    if it.peek() == Some(&"access") {
        it.next();
    }
    if it.next() != Some("to") {
        return Err("a rule starts with 'to'".into());
    }
    let mut what = What::default();
    let mut seen_what = false;
    while let Some(t) = it.peek().copied() {
        if t == "by" {
            break;
        }
        it.next();
        seen_what = true;
        what_part(acl, &mut what, t)?;
    }
    if !seen_what {
        return Err("'to' must be followed by what the rule covers ('*', dn=, filter=, attrs=)".into());
    }
    let mut by = Vec::new();
    while let Some(t) = it.next() {
        if t != "by" {
            return Err(format!("expected 'by', found {t:?}"));
        }
        by.push(by_clause(acl, &mut it)?);
    }
    if by.is_empty() {
        return Err("a rule needs at least one 'by <who> <level>' clause".into());
    }
    Ok(Rule { what, by, text: text.trim().to_string() })
}

fn what_part(acl: &mut Acl, what: &mut What, t: &str) -> Result<(), String> {
    if t == "*" {
        return Ok(());
    }
    let (key, value) = t.split_once('=').ok_or_else(|| format!("{t:?} is not '*', dn=, filter= or attrs="))?;
    let (name, style) = key.split_once('.').unwrap_or((key, ""));
    match name {
        "dn" => set_once(&mut what.dn, dn_pattern(style, value, "regex")?, "dn"),
        "filter" => {
            let f = filter::parse(value).map_err(|e| format!("filter {value:?}: {e}"))?;
            let compiled = filter::compile(&f);
            if compiled.has_undefined() {
                // Accepted, as slapd accepts it, but such an item matches
                // nothing (`(locked=true)`: a Boolean is TRUE or FALSE),
                // so the rule may never apply: said where it is read.
                eprintln!(
                    "coredir: warning: access rule filter {value:?} has an item that is Undefined for every \
                     entry (an unknown attribute, or a value its matching rule refuses)"
                );
            }
            set_once(&mut what.filter, compiled, "filter")
        }
        "attrs" | "attr" if style.is_empty() => set_once(&mut what.attrs, attr_list(acl, value)?, "attrs"),
        "val" => Err("val= (value-level rules) is not supported".into()),
        _ => Err(format!("{key:?} is not understood in <what> (dn, filter and attrs are)")),
    }
}

fn set_once<T>(slot: &mut Option<T>, v: T, what: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{what}= given twice"));
    }
    *slot = Some(v);
    Ok(())
}

fn attr_list(acl: &mut Acl, value: &str) -> Result<AttrList, String> {
    let mut list = AttrList::default();
    for a in value.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match a {
            "entry" => list.entry = true,
            "children" => list.children = true,
            _ if a.starts_with('@') || a.starts_with('!') => {
                return Err(format!("{a:?}: object class and negated attribute lists are not supported"))
            }
            _ => {
                let names = Names::new(a).ok_or_else(|| format!("{a:?} is not an attribute type of the schema"))?;
                list.types.push(named_index(acl, names)?);
            }
        }
    }
    Ok(list)
}

fn named_index(acl: &mut Acl, names: Names) -> Result<usize, String> {
    if let Some(i) = acl.named.iter().position(|n| n.same(&names)) {
        return Ok(i);
    }
    if acl.named.len() == 64 {
        return Err("the rules name more than 64 attribute types".into());
    }
    acl.add_named(names);
    Ok(acl.named.len() - 1)
}

/// A DN pattern of the given style (`default` when none is written).
fn dn_pattern(style: &str, value: &str, default: &str) -> Result<DnPattern, String> {
    let style = if style.is_empty() { default } else { style };
    if style == "regex" {
        // Unanchored, as slapd's regexec(3): rules anchor with ^ and $.
        let re =
            RegexBuilder::new(value).case_insensitive(true).build().map_err(|e| format!("dn.regex {value:?}: {e}"))?;
        return Ok(DnPattern::Regex(re));
    }
    let key = Dn::parse(value).map_err(|e| format!("DN {value:?}: {}", e.message))?.key();
    Ok(match style {
        "base" | "exact" | "baseobject" => DnPattern::Base(key),
        "one" | "onelevel" => DnPattern::One(key),
        "sub" | "subtree" => DnPattern::Subtree(key),
        "children" => DnPattern::Children(key),
        _ => return Err(format!("dn.{style}: unknown style (base, exact, one, subtree, children, regex)")),
    })
}

fn by_clause<'t>(acl: &mut Acl, it: &mut std::iter::Peekable<impl Iterator<Item = &'t str>>) -> Result<By, String> {
    let mut who = Vec::new();
    let mut text = vec!["by"];
    let privs = loop {
        let t = it.peek().copied().ok_or("'by' clause without an access level")?;
        // `by * break`: no level, only a control (grants nothing).
        if !who.is_empty() && matches!(t, "stop" | "continue" | "break") {
            break Privs::NONE;
        }
        it.next();
        text.push(t);
        if let Some(level) = Level::parse(t) {
            break level.cumulative();
        }
        if let Some(letters) = t.strip_prefix('=') {
            break Privs::parse(letters).ok_or_else(|| format!("{t:?}: privileges are letters of =mwrscxd"))?;
        }
        if t.starts_with('+') || t.starts_with('-') {
            return Err(format!("{t:?}: incremental privileges (+/-) are not supported; write =... instead"));
        }
        if t == "by" {
            return Err("'by' clause without an access level".into());
        }
        who.push(who_part(acl, t)?);
    };
    if who.is_empty() {
        return Err(format!("'by {}' names nobody", privs.describe()));
    }
    let control = match it.peek().copied() {
        Some("stop") => Control::Stop,
        Some("continue") => Control::Continue,
        Some("break") => Control::Break,
        _ => return Ok(By { who, privs, control: Control::Stop, text: text.join(" ") }),
    };
    text.push(it.next().expect("peeked"));
    Ok(By { who, privs, control, text: text.join(" ") })
}

fn who_part(acl: &mut Acl, t: &str) -> Result<Who, String> {
    match t {
        "*" => return Ok(Who::Any),
        "anonymous" => return Ok(Who::Anonymous),
        "users" => return Ok(Who::Users),
        "self" => return Ok(Who::Itself),
        _ => {}
    }
    let (key, value) =
        t.split_once('=').ok_or_else(|| format!("{t:?} is not a <who> or an access level ({})", levels()))?;
    let number = || value.parse::<u32>().map_err(|_| format!("{key}: {value:?} is not a number"));
    let (name, style) = key.split_once('.').unwrap_or((key, ""));
    if let Some(spec) = name.strip_prefix("group") {
        if !matches!(style, "" | "exact") {
            return Err(format!("group.{style}: only exact group DNs are supported"));
        }
        let mut parts = spec.split('/').skip(1);
        let class = parts.next().unwrap_or("groupOfNames").to_string();
        let attr = parts.next().unwrap_or("member").to_string();
        if shards::matching::attr_type(&attr).is_none() {
            return Err(format!("group: {attr:?} is not an attribute type of the schema"));
        }
        let key = Dn::parse(value).map_err(|e| format!("group DN {value:?}: {}", e.message))?.key();
        acl.group_slots += 1;
        return Ok(Who::Group { key, class, attr, slot: acl.group_slots - 1 });
    }
    match name {
        "dn" => Ok(Who::Dn(dn_pattern(style, value, "regex")?)),
        "ssf" => Ok(Who::Ssf(number()?)),
        "tls_ssf" => Ok(Who::TlsSsf(number()?)),
        "transport_ssf" => Ok(Who::TransportSsf(number()?)),
        _ => Err(format!(
            "{key:?} is not understood in <who> (*, anonymous, users, self, dn.<style>=, group=, ssf=, \
             tls_ssf=, transport_ssf= are)"
        )),
    }
}

fn levels() -> String {
    Level::ALL.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
}

/// Splits on spaces outside double quotes and parentheses; quotes are removed.
fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut depth) = (false, 0usize);
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => {
                depth += 1;
                cur.push(c);
            }
            ')' if !quoted => {
                depth = depth.checked_sub(1).ok_or("unbalanced ')'")?;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted && depth == 0 => {
                if !cur.is_empty() {
                    tokens.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated '\"'".into());
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    Ok(tokens)
}
