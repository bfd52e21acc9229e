//! Running a case against one server and writing down its transcript.

use super::*;

/// Writes one entry: DN, then attributes sorted by name, values sorted.
pub(super) fn show_entry(tag: StructureTag, indent: &str, out: &mut Vec<String>) {
    let mut parts = tag.expect_constructed().unwrap_or_default().into_iter();
    let dn = parts.next().and_then(|t| t.expect_primitive()).unwrap_or_default();
    out.push(format!("{indent}dn: {}", text(&dn)));
    let mut attrs: Vec<(String, Vec<String>)> = Vec::new();
    for a in parts.next().and_then(|t| t.expect_constructed()).unwrap_or_default() {
        let mut pa = a.expect_constructed().unwrap_or_default().into_iter();
        let name = text(&pa.next().and_then(|t| t.expect_primitive()).unwrap_or_default());
        let volatile = VOLATILE.contains(&name.to_lowercase().split(';').next().unwrap_or(""));
        let mut vals: Vec<String> = pa
            .next()
            .and_then(|t| t.expect_constructed())
            .unwrap_or_default()
            .into_iter()
            .map(|v| {
                let v = v.expect_primitive().unwrap_or_default();
                if volatile {
                    "*".into()
                } else {
                    match std::str::from_utf8(&v) {
                        Ok(s) if !s.starts_with(' ') && !s.contains('\n') => format!(" {s}"),
                        _ => format!(": {}", base64::engine::general_purpose::STANDARD.encode(&v)),
                    }
                }
            })
            .collect();
        vals.sort();
        attrs.push((name, vals));
    }
    attrs.sort_by_key(|(n, _)| n.to_lowercase());
    for (name, vals) in attrs {
        if vals.is_empty() {
            out.push(format!("{indent}  {name} (no values)"));
        }
        for v in vals {
            out.push(format!("{indent}  {name}:{v}"));
        }
    }
}

pub(super) fn show_result(what: &str, r: &ldap3::LdapResult, out: &mut Vec<String>) {
    out.push(format!("{what} rc={} matched={:?}", r.rc, r.matched));
    // Which of a referral's URLs comes first is the server's choice (RFC
    // 4511 §4.1.10: any may be used), and so is the order of references.
    let mut refs = r.refs.clone();
    refs.sort();
    for u in &refs {
        out.push(format!("  ref {u}"));
    }
    for c in &r.ctrls {
        show_control(c, out);
    }
}

/// A connection to one server, bound as the case asks.
pub(super) struct Session {
    pub(super) url: String,
    pub(super) conn: LdapConn,
}

impl Session {
    pub(super) fn new(url: &str) -> Session {
        let mut conn = LdapConn::new(url).expect("connect");
        conn.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
        Session { url: url.into(), conn }
    }

    /// After the server closed the connection: a new one, as root.
    pub(super) fn reconnect(&mut self, out: &mut Vec<String>) {
        out.push("  (connection closed; reconnected as root)".into());
        *self = Session::new(&self.url);
    }
}

pub(super) fn run_case(url: &str, case: &Case) -> Vec<String> {
    let base = format!("ou={},{SUFFIX}", case.name);
    let mut s = Session::new(url);
    let container: Vec<(&str, HashSet<&str>)> =
        vec![("objectClass", ["organizationalUnit"].into()), ("ou", [case.name.as_str()].into())];
    s.conn.add(&base, container.clone()).unwrap().success().unwrap_or_else(|e| panic!("{}: container: {e}", case.at));
    let second = format!("ou={},{SECOND}", case.name);
    s.conn.add(&second, container).unwrap().success().unwrap_or_else(|e| panic!("{}: container: {e}", case.at));
    let mut out = Vec::new();
    for op in &case.ops {
        let mark = out.len();
        let controls: Vec<RawControl> = op.all("control").iter().map(|c| control(&expand(c, &base))).collect();
        let res = run_op(&mut s, op, &base, controls, &mut out);
        if let Err(e) = res {
            out.truncate(mark);
            out.push(format!("{} {}: client error {}", op.kind, op.line, error_kind(&e)));
            if s.conn.is_closed() {
                s.reconnect(&mut out);
            }
        }
    }
    out
}

/// Deletes a case's containers and everything below them (as root), so
/// the case can run again on that server.
pub(super) fn clear_containers(url: &str, case: &Case) {
    let mut c = LdapConn::new(url).unwrap();
    c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
    for suffix in [SUFFIX, SECOND] {
        let base = format!("ou={},{suffix}", case.name);
        // ManageDsaIT: referral objects are entries to find and delete.
        let manage = RawControl { ctype: "2.16.840.1.113730.3.4.2".into(), crit: false, val: None };
        let Ok(found) = c.with_controls(manage.clone()).search(&base, Scope::Subtree, "(objectClass=*)", vec!["1.1"])
        else {
            continue;
        };
        let mut dns: Vec<String> =
            found.0.into_iter().filter(|e| !e.is_ref()).map(|e| ldap3::SearchEntry::construct(e).dn).collect();
        // Deepest first: a parent goes after its children.
        dns.sort_by_key(|dn| std::cmp::Reverse(dn.matches(',').count()));
        for dn in dns {
            let _ = c.with_controls(manage.clone()).delete(&dn);
        }
    }
}

/// The client error, without details that differ between servers.
pub(super) fn error_kind(e: &ldap3::LdapError) -> String {
    match e {
        ldap3::LdapError::FilterParsing => "filter does not parse".into(),
        ldap3::LdapError::EndOfStream => "connection closed".into(),
        ldap3::LdapError::Io { .. } => "connection closed".into(),
        other => format!("{other:?}").split(['(', ' ', '{']).next().unwrap_or("").to_string(),
    }
}

pub(super) fn bytes_set(op: &Op, range: std::ops::Range<usize>) -> Vec<(Vec<u8>, HashSet<Vec<u8>>)> {
    let mut attrs: Vec<(Vec<u8>, HashSet<Vec<u8>>)> = Vec::new();
    for (name, v) in &op.lines[range] {
        if name.eq_ignore_ascii_case("control") {
            continue;
        }
        match attrs.iter_mut().find(|(n, _)| n.as_slice() == name.as_bytes()) {
            Some((_, vs)) => {
                vs.insert(v.clone());
            }
            None => attrs.push((name.as_bytes().to_vec(), [v.clone()].into())),
        }
    }
    attrs
}

pub(super) fn run_op(
    s: &mut Session,
    op: &Op,
    base: &str,
    controls: Vec<RawControl>,
    out: &mut Vec<String>,
) -> ldap3::result::Result<()> {
    let op = &op.expanded(base);
    let dn = expand(&op.arg, base);
    let what = format!("{} {}", op.kind, op.line);
    let c = &mut s.conn;
    match op.kind.as_str() {
        "bind" => {
            let r = match dn.as_str() {
                "root" => c.with_controls(controls).simple_bind(ROOT_DN, ROOT_PW)?,
                "anonymous" => c.with_controls(controls).simple_bind("", "")?,
                _ => c.with_controls(controls).simple_bind(&dn, &op.get("password").unwrap_or_default())?,
            };
            show_result(&what, &r, out);
        }
        "add" => {
            let attrs = bytes_set(op, 0..op.lines.len());
            let r = c.with_controls(controls).add(&dn, attrs)?;
            show_result(&what, &r, out);
        }
        "delete" => {
            let r = c.with_controls(controls).delete(&dn)?;
            show_result(&what, &r, out);
        }
        "modify" => {
            let r = c.with_controls(controls).modify(&dn, mods(op))?;
            show_result(&what, &r, out);
        }
        "modrdn" => {
            let newrdn = expand(&op.get("newrdn").expect("newrdn"), base);
            let delold = op.get("deleteoldrdn").is_none_or(|v| v == "1");
            let sup = op.get("newsuperior").map(|v| expand(&v, base));
            let r = c.with_controls(controls).modifydn(&dn, &newrdn, delold, sup.as_deref())?;
            show_result(&what, &r, out);
        }
        "compare" => {
            let attr = op.get("attr").expect("attr");
            let value = op.lines.iter().find(|(n, _)| n == "value").map(|(_, v)| v.clone()).unwrap_or_default();
            let r = c.with_controls(controls).compare(&dn, &attr, value)?;
            show_result(&what, &r.0, out);
        }
        "search" => search(c, op, &dn, base, controls, &what, out)?,
        "pipeline" => pipeline(&s.url, op, &what, out),
        "exop" => {
            let r = match op.arg.as_str() {
                "whoami" => c.with_controls(controls).extended(WhoAmI)?,
                "passwd" => {
                    let (user, old, new) = (op.get("user").map(|u| expand(&u, base)), op.get("old"), op.get("new"));
                    let pm =
                        PasswordModify { user_id: user.as_deref(), old_pass: old.as_deref(), new_pass: new.as_deref() };
                    c.with_controls(controls).extended(pm)?
                }
                oid => {
                    let val = op.lines.iter().find(|(n, _)| n == "value").map(|(_, v)| v.clone());
                    c.with_controls(controls).extended(Exop { name: Some(oid.into()), val })?
                }
            };
            show_result(&what, &r.1, out);
            let generated = op.arg == "passwd" && r.0.val.is_some();
            out.push(format!(
                "  name={:?} value={}",
                r.0.name,
                match (generated, &r.0.val) {
                    (true, _) => "<generated>".to_string(),
                    (false, Some(v)) => format!("{:?}", text(v)),
                    (false, None) => "none".into(),
                }
            ));
        }
        other => panic!("line {}: unknown operation {other}", op.line),
    }
    Ok(())
}

/// `pipeline:` on a new connection, every `send:` request written at
/// once before any answer is read (as clients that pipeline do); the
/// answers in the order they arrive, each with its message ID.
/// `send: bind DN PASSWORD` | `bindhex DN HEX` | `whoami` | `search BASE`
/// (base scope, `(objectClass=*)`) | `modify DN ATTR VALUE` (a replace) |
/// `increment DN ATTR VALUE...` | `hex BYTES` (any bytes: a whole
/// LDAPMessage, malformed or not, or part of one) to which one answer is
/// awaited | `hex0 BYTES`, to which none is. Answers are read until each
/// request has had one or the server closes the connection (and after a
/// Notice of Disconnection, until it closes). slapd runs the requests of
/// one connection side by side, so a request sent after one that ends
/// the connection may or may not be answered: cases do not send one.
pub(super) fn pipeline(url: &str, op: &Op, what: &str, out: &mut Vec<String>) {
    use ldap3_proto::proto::{LdapModifyType, LdapMsg};
    let addr = url.trim_start_matches("ldap://").trim_end_matches('/');
    let sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut raw = Raw::over(sock);
    let mut bytes = Vec::new();
    let mut count = 0;
    for (n, line) in op.all("send").iter().enumerate() {
        let w: Vec<&str> = line.split(' ').collect();
        let request = match w.as_slice() {
            ["bind", dn, pw] => bind(dn, pw),
            // A password of any bytes, in hex (ldap3_proto sends only UTF-8).
            ["bindhex", dn, hex] => {
                bytes.extend_from_slice(&bind_bytes(n as i32 + 1, dn, &unhex(hex)));
                count += 1;
                continue;
            }
            [kind @ ("hex" | "hex0"), hex] => {
                bytes.extend_from_slice(&unhex(hex));
                count += usize::from(*kind == "hex");
                continue;
            }
            ["whoami"] => whoami(),
            ["search", base] => crate::support::search(base, ldap3_proto::proto::LdapSearchScope::Base),
            ["modify", dn, attr, value] => modify_request(dn, LdapModifyType::Replace, attr, &[value]),
            ["increment", dn, attr, values @ ..] => modify_request(dn, LdapModifyType::Increment, attr, values),
            _ => panic!("line {}: send: {line}?", op.line),
        };
        bytes.extend_from_slice(&crate::support::encode_msgs(vec![LdapMsg::new(n as i32 + 1, request)]));
        count += 1;
    }
    // The server may close before it has read it all.
    let _ = std::io::Write::write_all(&mut raw.sock, &bytes);
    out.push(what.to_string());
    // Answers by message ID (requests after a Bind may run side by side,
    // so their order among themselves is not compared), and whether each
    // Bind was answered before anything sent after it.
    let mut answers: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let (mut arrival, mut done, mut closing, mut closed) = (Vec::new(), 0, false, false);
    while closing || done < count {
        let Some(frame) = raw.recv_frame() else {
            closed = true;
            break;
        };
        let (msgid, tag, line) = answer_line(&frame);
        closing |= line.contains("name=1.3.6.1.4.1.1466.20036");
        if tag != 0x64 {
            done += 1;
        }
        arrival.push((msgid, tag == 0x61));
        answers.entry(msgid).or_default().push(line);
    }
    for (id, lines) in answers {
        out.extend(lines.into_iter().map(|l| format!("  #{id} {l}")));
    }
    if closed {
        out.push("  (connection closed)".into());
    }
    for (at, (id, _)) in arrival.iter().enumerate().filter(|(_, (_, is_bind))| *is_bind) {
        let first = arrival[..at].iter().all(|(before, _)| before < id);
        out.push(format!("  bind #{id} answered before anything sent after it: {first}"));
    }
}

/// One element of BER: tag, content, what follows.
pub(super) fn read_tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        let (bytes, after) = (rest.get(..n)?, rest.get(n..)?);
        rest = after;
        bytes.iter().fold(0usize, |a, b| a << 8 | *b as usize)
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// An answer as the transcript shows it, read from its bytes (so any
/// answer a server sends can be shown): its message ID, protocolOp tag,
/// and a line naming it with its result code (or an entry's DN).
pub(super) fn answer_line(frame: &[u8]) -> (i64, u8, String) {
    let parse = || {
        let (_, msg, _) = read_tlv(frame)?;
        let (_, id, rest) = read_tlv(msg)?;
        let msgid = id.iter().fold(if id.first()? & 0x80 != 0 { -1i64 } else { 0 }, |a, b| a << 8 | *b as i64);
        let (tag, op, _) = read_tlv(rest)?;
        let first = read_tlv(op);
        let rc = || first.filter(|f| f.0 == 0x0a).map(|(_, c, _)| c.iter().fold(0u32, |a, b| a << 8 | *b as u32));
        let line = match tag {
            0x64 => format!("entry {}", String::from_utf8_lossy(first?.1)),
            0x61 => format!("bind rc={}", rc()?),
            0x65 => format!("search rc={}", rc()?),
            0x67 => format!("modify rc={}", rc()?),
            0x69 => format!("add rc={}", rc()?),
            0x6b => format!("delete rc={}", rc()?),
            0x6d => format!("modrdn rc={}", rc()?),
            0x6f => format!("compare rc={}", rc()?),
            0x78 => {
                // After the result's three fields: responseName [10], responseValue [11].
                let (_, _, after) = read_tlv(read_tlv(first?.2)?.2)?;
                let (mut name, mut value) = (None, None);
                let mut fields = after;
                while let Some((t, c, next)) = read_tlv(fields) {
                    match t {
                        0x8a => name = Some(String::from_utf8_lossy(c).into_owned()),
                        0x8b => value = Some(String::from_utf8_lossy(c).into_owned()),
                        _ => {}
                    }
                    fields = next;
                }
                let name = name.map(|n| format!(" name={n}")).unwrap_or_default();
                format!("extended rc={}{name} value={value:?}", rc()?)
            }
            other => format!("protocolOp 0x{other:02x}"),
        };
        Some((msgid, tag, line))
    };
    parse().unwrap_or_else(|| (-1, 0, format!("undecodable answer {}", hex(frame))))
}

/// A simple BindRequest, written byte by byte: its password may be any
/// octets (RFC 4511 §4.2), which ldap3_proto cannot send.
pub(super) fn bind_bytes(msgid: i32, dn: &str, password: &[u8]) -> Vec<u8> {
    let op = [tlv(0x02, &[3]), tlv(0x04, dn.as_bytes()), tlv(0x80, password)].concat();
    tlv(0x30, &[tlv(0x02, &msgid.to_be_bytes()), tlv(0x60, &op)].concat())
}

/// A modify of one attribute, with any number of values (the ldap3 crate
/// sends an increment with exactly one).
pub(super) fn modify_request(
    dn: &str,
    operation: ldap3_proto::proto::LdapModifyType,
    attr: &str,
    values: &[&str],
) -> ldap3_proto::proto::LdapOp {
    use ldap3_proto::proto::{LdapModify, LdapModifyRequest, LdapPartialAttribute};
    let vals = values.iter().map(|v| v.as_bytes().to_vec()).collect();
    let modification = LdapPartialAttribute { atype: attr.to_string(), vals };
    ldap3_proto::proto::LdapOp::ModifyRequest(LdapModifyRequest {
        dn: dn.to_string(),
        changes: vec![LdapModify { operation, modification }],
    })
}

pub(super) fn mods(op: &Op) -> Vec<Mod<Vec<u8>>> {
    let mut mods = Vec::new();
    let mut i = 0;
    while i < op.lines.len() {
        let (kind, attr) = (&op.lines[i].0, op.lines[i].1.clone());
        if kind == "control" {
            i += 1;
            continue;
        }
        let end = op.lines[i + 1..].iter().position(|(n, _)| n == "-").map_or(op.lines.len(), |p| p + i + 1);
        let vals: HashSet<Vec<u8>> =
            op.lines[i + 1..end].iter().filter(|(n, _)| n != "control").map(|(_, v)| v.clone()).collect();
        mods.push(match kind.as_str() {
            "add" => Mod::Add(attr, vals),
            "delete" => Mod::Delete(attr, vals),
            "replace" => Mod::Replace(attr, vals),
            "increment" => Mod::Increment(attr, vals.into_iter().next().unwrap_or_default()),
            other => panic!("line {}: modify kind {other}", op.line),
        });
        i = end + 1;
    }
    mods
}

pub(super) fn search(
    c: &mut LdapConn,
    op: &Op,
    dn: &str,
    base: &str,
    controls: Vec<RawControl>,
    what: &str,
    out: &mut Vec<String>,
) -> ldap3::result::Result<()> {
    let scope = match op.get("scope").as_deref() {
        Some("base") => Scope::Base,
        Some("one") => Scope::OneLevel,
        None | Some("sub") => Scope::Subtree,
        Some(other) => panic!("line {}: scope {other}", op.line),
    };
    let filter = expand(&op.get("filter").unwrap_or_else(|| "(objectClass=*)".into()), base);
    let attrs: Vec<String> =
        op.get("attrs").map(|a| a.split_whitespace().map(String::from).collect()).unwrap_or_default();
    let opts = SearchOptions::new()
        .sizelimit(op.get("sizelimit").map_or(0, |v| v.parse().unwrap()))
        .timelimit(op.get("timelimit").map_or(0, |v| v.parse().unwrap()))
        .typesonly(op.get("typesonly").is_some())
        .deref(match op.get("deref").as_deref() {
            Some("always") => ldap3::DerefAliases::Always,
            Some("search") => ldap3::DerefAliases::Searching,
            Some("find") => ldap3::DerefAliases::Finding,
            _ => ldap3::DerefAliases::Never,
        });
    let ordered = op.all("control").iter().any(|c| c.trim_start_matches('!').starts_with("sort") || c.contains("vlv"));
    // `paged: N` pages through the whole result, N entries at a time.
    let page = op.get("paged").map(|n| n.parse::<i64>().unwrap());
    let mut cookie: Vec<u8> = Vec::new();
    let mut entries = Vec::new();
    let mut pages = 0;
    loop {
        let mut ctrls = controls.clone();
        if let Some(size) = page {
            let v = encode(seq(vec![int(size), octets(4, TagClass::Universal, &cookie)]));
            ctrls.push(RawControl { ctype: "1.2.840.113556.1.4.319".into(), crit: false, val: Some(v) });
        }
        let r = c.with_search_options(opts.clone()).with_controls(ctrls).search(dn, scope, &filter, attrs.clone())?;
        pages += 1;
        let mut this_page: Vec<String> = r.0.into_iter().map(show_search_entry).collect();
        if !ordered && r.1.rc == 4 {
            // Which entries fill an unsorted result up to the size limit is
            // the server's choice: only how many is compared.
            this_page = vec![format!("  {} entries before the size limit", this_page.len())];
        }
        if !ordered {
            this_page.sort();
        }
        entries.extend(this_page);
        let label = if page.is_some() { format!("{what} page {pages}") } else { what.to_string() };
        show_result(&label, &r.1, &mut entries);
        cookie =
            r.1.ctrls
                .iter()
                .find(|c| c.1.ctype == "1.2.840.113556.1.4.319")
                .and_then(|c| parse_tag(c.1.val.as_deref().unwrap_or_default()).ok())
                .and_then(|(_, t)| t.expect_constructed())
                .and_then(|f| f.into_iter().nth(1))
                .and_then(|t| t.expect_primitive())
                .unwrap_or_default();
        if page.is_none() || cookie.is_empty() || r.1.rc != 0 || pages > 1000 {
            break;
        }
    }
    // Unsorted pages may split the entries differently: only their union
    // and the page results are compared then.
    if page.is_some() && !ordered {
        // References go with the entries: which page carries them is the
        // server's choice too.
        let (mut ents, results): (Vec<String>, Vec<String>) =
            entries.into_iter().partition(|e| e.starts_with("  dn:") || e.starts_with("  ref "));
        ents.sort();
        if results.iter().any(|r| r.contains(" rc=4 ")) {
            // Cut by the size limit: which entries is the server's choice.
            ents = vec![format!("  {} entries before the size limit", ents.len())];
        }
        out.push(format!("{what}: {} entries in {} pages", ents.len(), pages));
        // Pages are split as the server likes, but whether it paged at all
        // (slapd ignores paging when the size limit is within one page) shows.
        let bare = results.iter().filter(|r| r.contains(" page ")).count()
            - results.iter().filter(|r| r.starts_with("  control paged")).count();
        if bare > 0 {
            out.push(format!("  {bare} pages without a paged results control"));
        }
        entries = ents.into_iter().chain(results.into_iter().filter(|r| !r.starts_with("  control paged"))).collect();
    }
    out.extend(entries.iter().flat_map(|e| e.lines().map(String::from)));
    Ok(())
}

/// An entry or a reference, as one block of lines joined by newlines (so
/// a page's entries can be sorted as units).
pub(super) fn show_search_entry(e: ResultEntry) -> String {
    let mut lines = Vec::new();
    if e.is_ref() {
        let urls: Vec<String> =
            e.0.expect_constructed()
                .unwrap_or_default()
                .into_iter()
                .map(|t| text(&t.expect_primitive().unwrap_or_default()))
                .collect();
        lines.push(format!("  reference {}", urls.join(" ")));
    } else {
        show_entry(e.0, "  ", &mut lines);
    }
    for c in &e.1 {
        show_control(c, &mut lines);
    }
    lines.join("\n")
}
