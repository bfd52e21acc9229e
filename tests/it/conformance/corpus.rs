//! The case files: their language read into cases and operations.

use super::*;

/// One case: a name, where it is written, and its operations.
pub(super) struct Case {
    pub(super) name: String,
    pub(super) at: String,
    pub(super) ops: Vec<Op>,
}

/// One operation: its first line (`search: BASE`), then `name: value`
/// lines (values already base64-decoded), `-` separators kept as `("-", "")`.
#[derive(Clone)]
pub(super) struct Op {
    pub(super) kind: String,
    pub(super) arg: String,
    pub(super) lines: Vec<(String, Vec<u8>)>,
    pub(super) line: usize,
}

impl Op {
    /// The operation with `$B`/`$S`/`$N` expanded in its text values too
    /// (`member: uid=u1,$B`).
    pub(super) fn expanded(&self, base: &str) -> Op {
        let value = |v: &Vec<u8>| match std::str::from_utf8(v) {
            Ok(t) if t.contains('$') => expand(t, base).into_bytes(),
            _ => v.clone(),
        };
        let name = |n: &String| if n.contains('$') { expand(n, base) } else { n.clone() };
        Op { lines: self.lines.iter().map(|(n, v)| (name(n), value(v))).collect(), ..self.clone() }
    }

    pub(super) fn get(&self, name: &str) -> Option<String> {
        self.lines.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| text(v))
    }

    pub(super) fn all(&self, name: &str) -> Vec<String> {
        self.lines.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| text(v)).collect()
    }
}

pub(super) fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

/// Reads every `*.cases` file: cases start with `=== name`, operations
/// are blank-line separated records, `#` starts a comment line.
pub(super) fn load_cases() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cases"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let area = f.file_stem().unwrap().to_string_lossy().into_owned();
        parse_file(&area, &std::fs::read_to_string(&f).unwrap(), &mut cases);
    }
    let mut seen = HashSet::new();
    for c in &cases {
        assert!(seen.insert(c.name.to_lowercase()), "{}: case name {} used twice", c.at, c.name);
    }
    cases
}

pub(super) fn parse_file(area: &str, body: &str, cases: &mut Vec<Case>) {
    let first = cases.len();
    let mut record: Vec<(usize, String)> = Vec::new();
    let flush = |record: &mut Vec<(usize, String)>, cases: &mut Vec<Case>| {
        if record.is_empty() {
            return;
        }
        let case = cases.last_mut().unwrap_or_else(|| panic!("{area}:{}: operation before any case", record[0].0));
        case.ops.push(parse_op(area, std::mem::take(record)));
    };
    for (i, raw) in body.lines().enumerate() {
        let n = i + 1;
        if let Some(name) = raw.strip_prefix("=== ") {
            flush(&mut record, cases);
            let name = name.trim();
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{area}:{n}: case names are letters, digits and '-'"
            );
            cases.push(Case { name: name.into(), at: format!("{area}.cases:{n}"), ops: Vec::new() });
        } else if raw.starts_with('#') {
            continue;
        } else if raw.trim().is_empty() {
            flush(&mut record, cases);
        } else if let Some(cont) = raw.strip_prefix(' ') {
            // LDIF folding: a line starting with one space continues the last.
            let (_, last) = record.last_mut().unwrap_or_else(|| panic!("{area}:{n}: continuation of nothing"));
            last.push_str(cont);
        } else {
            record.push((n, raw.to_string()));
        }
    }
    flush(&mut record, cases);
    // A case named `setup` first in a file runs before each of its cases.
    if cases.get(first).is_some_and(|c| c.name == "setup") {
        let setup = cases.remove(first).ops;
        for c in &mut cases[first..] {
            c.ops.splice(0..0, setup.iter().cloned());
        }
    }
}

pub(super) fn parse_op(area: &str, record: Vec<(usize, String)>) -> Op {
    let line = record[0].0;
    let mut lines = Vec::new();
    for (n, l) in &record {
        if l == "-" {
            lines.push(("-".to_string(), Vec::new()));
            continue;
        }
        let (name, value) = l.split_once(':').unwrap_or_else(|| panic!("{area}:{n}: expected `name: value`"));
        let value = if let Some(b64) = value.strip_prefix(':') {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap_or_else(|e| panic!("{area}:{n}: base64: {e}"))
        } else {
            value.strip_prefix(' ').unwrap_or(value).as_bytes().to_vec()
        };
        lines.push((name.to_string(), value));
    }
    let (kind, arg) = lines.remove(0);
    Op { kind: kind.to_lowercase(), arg: text(&arg), lines, line }
}

/// `$B` is the case's own container, `$S` the suffix, `$N` the case's
/// container in the second naming context, and `$R(n text)` is `text`
/// n times (long DNs and filters without pages of case text).
pub(super) fn expand(s: &str, base: &str) -> String {
    let second = base.replace(SUFFIX, SECOND);
    let mut s = s.replace("$B", base).replace("$S", SUFFIX).replace("$N", &second);
    while let Some(at) = s.find("$R(") {
        let end = at + s[at..].find(')').expect("$R( is closed by )");
        let (n, text) = s[at + 3..end].split_once(' ').expect("$R(n text)");
        let repeated = text.repeat(n.parse().expect("$R count"));
        s.replace_range(at..=end, &repeated);
    }
    s
}
