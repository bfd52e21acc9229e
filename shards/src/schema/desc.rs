//! The RFC 4512 description syntax as schema files write it: tokens
//! (`(`, `)`, `$`, quoted strings, words), one description's OID and
//! keyword fields (`Desc`), and slapd's `ldapsyntax … X-SUBST` form. What
//! the fields mean is `parse`'s business.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Open,
    Close,
    Dollar,
    Quoted(String),
    Word(String),
}

pub(super) fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '(' => out.push(Token::Open),
            ')' => out.push(Token::Close),
            '$' => out.push(Token::Dollar),
            '\'' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        // RFC 4512 escapes: \27 is a quote, \5C a backslash.
                        Some((_, '\\')) => {
                            let hex: String = (0..2).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                            match hex.to_ascii_lowercase().as_str() {
                                "27" => s.push('\''),
                                "5c" => s.push('\\'),
                                _ => return Err(format!("bad escape \\{hex} in quoted string")),
                            }
                        }
                        Some((_, c)) => s.push(c),
                        None => return Err(format!("unterminated quoted string at column {}", at + 1)),
                    }
                }
                out.push(Token::Quoted(s));
            }
            _ => {
                let mut end = at + c.len_utf8();
                while let Some((i, c)) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '$' | '\'') {
                        break;
                    }
                    end = i + c.len_utf8();
                    chars.next();
                }
                out.push(Token::Word(text[at..end].to_string()));
            }
        }
    }
    Ok(out)
}

/// One parsed description: its OID (still unexpanded) and keyword fields.
#[derive(Debug, Default)]
pub(super) struct Desc {
    pub(super) oid: String,
    pub(super) fields: Vec<(String, Vec<String>)>,
}

impl Desc {
    pub(super) fn get(&self, key: &str) -> Option<&[String]> {
        self.fields.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_slice())
    }
    pub(super) fn one(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.first()).map(String::as_str)
    }
    pub(super) fn flag(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Attr,
    Class,
}

pub(super) const FLAGS: &[&str] =
    &["OBSOLETE", "SINGLE-VALUE", "COLLECTIVE", "NO-USER-MODIFICATION", "ABSTRACT", "STRUCTURAL", "AUXILIARY"];

pub(super) fn parse_desc(text: &str, kind: Kind) -> Result<Desc, String> {
    let tokens = tokenize(text)?;
    let mut it = tokens.into_iter().peekable();
    if it.next() != Some(Token::Open) {
        return Err("a definition starts with '('".into());
    }
    let mut desc = Desc::default();
    match it.next() {
        Some(Token::Word(oid)) => desc.oid = oid,
        _ => return Err("the OID must follow '('".into()),
    }
    loop {
        let key = match it.next() {
            Some(Token::Close) => break,
            Some(Token::Word(w)) => w.to_ascii_uppercase(),
            Some(t) => return Err(format!("unexpected {t:?} where a keyword belongs")),
            None => return Err("missing ')' at the end of the definition".into()),
        };
        if desc.get(&key).is_some() {
            return Err(format!("{key} appears twice"));
        }
        let values = match key.as_str() {
            k if FLAGS.contains(&k) => Vec::new(),
            "NAME" | "DESC" => quoted_list(&mut it, &key)?,
            k if k.starts_with("X-") => quoted_list(&mut it, &key)?,
            "SUP" | "MUST" | "MAY" => oid_list(&mut it, &key)?,
            "EQUALITY" | "ORDERING" | "SUBSTR" | "SYNTAX" | "USAGE" if kind == Kind::Attr => {
                vec![word(&mut it, &key)?]
            }
            _ => return Err(format!("unknown keyword {key}")),
        };
        if key == "DESC" && values.len() != 1 {
            return Err("DESC takes one quoted string".into());
        }
        desc.fields.push((key, values));
    }
    if it.next().is_some() {
        return Err("text after the closing ')'".into());
    }
    Ok(desc)
}

type Tokens = std::iter::Peekable<std::vec::IntoIter<Token>>;

fn word(it: &mut Tokens, key: &str) -> Result<String, String> {
    match it.next() {
        Some(Token::Word(w)) => Ok(w),
        // slapd also takes a quoted OID (`SYNTAX '1.3.6...'`, dyngroup.schema).
        Some(Token::Quoted(w)) if key == "SYNTAX" => Ok(w),
        _ => Err(format!("{key} needs a value")),
    }
}

fn quoted_list(it: &mut Tokens, key: &str) -> Result<Vec<String>, String> {
    match it.next() {
        Some(Token::Quoted(s)) => Ok(vec![s]),
        Some(Token::Open) => {
            let mut out = Vec::new();
            loop {
                match it.next() {
                    Some(Token::Quoted(s)) => out.push(s),
                    Some(Token::Close) if !out.is_empty() => return Ok(out),
                    _ => return Err(format!("{key} takes quoted strings")),
                }
            }
        }
        _ => Err(format!("{key} takes a quoted string")),
    }
}

fn oid_list(it: &mut Tokens, key: &str) -> Result<Vec<String>, String> {
    match it.next() {
        Some(Token::Word(w)) => Ok(vec![w]),
        Some(Token::Open) => {
            let mut out = Vec::new();
            loop {
                match it.next() {
                    Some(Token::Word(w)) => out.push(w),
                    Some(Token::Dollar) if !out.is_empty() => {}
                    Some(Token::Close) if !out.is_empty() => return Ok(out),
                    _ => return Err(format!("{key} takes a name or '( name $ name … )'")),
                }
            }
        }
        _ => Err(format!("{key} takes a name")),
    }
}

/// An `ldapsyntax ( OID … X-SUBST 'known-oid' )` definition, as slapd
/// takes it: a new syntax is a known one under another OID; without
/// `X-SUBST` nothing would say how to check its values.
pub(super) fn substitute(body: &str) -> Result<(String, String), String> {
    let inner = body.trim().strip_prefix('(').and_then(|b| b.trim_end().strip_suffix(')'));
    let inner = inner.ok_or("ldapsyntax takes '( OID … )'")?;
    let oid = inner.split_whitespace().next().ok_or("ldapsyntax needs an OID")?;
    let after = inner.find("X-SUBST").map(|i| &inner[i + "X-SUBST".len()..]);
    let quoted = after.and_then(|a| a.trim_start().strip_prefix('\'')).and_then(|a| a.split_once('\''));
    match quoted {
        Some((stand_in, _)) => Ok((oid.to_string(), stand_in.trim().to_string())),
        None => Err(format!("ldapsyntax {oid}: only a substitute of a known syntax (X-SUBST '<oid>') can be defined")),
    }
}
