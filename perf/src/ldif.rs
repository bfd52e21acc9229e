//! The benchmark data set: a suffix, `ou=people` with N users
//! (inetOrgPerson + posixAccount, `{SSHA}` of `pw<i>`), and `ou=groups`
//! with G groups (even: posixGroup with memberUid, odd: groupOfNames with
//! member DNs; user i belongs to group i mod G). Deterministic.

use base64::Engine;
use sha1::{Digest, Sha1};
use std::io::Write;

const FIRST: &[&str] =
    &["James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth"];
const LAST: &[&str] =
    &["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Martinez", "Wilson"];

fn ssha(pw: &str, i: usize) -> String {
    let salt = (i as u32).to_be_bytes();
    let mut h = Sha1::new();
    h.update(pw.as_bytes());
    h.update(salt);
    let mut raw = h.finalize().to_vec();
    raw.extend_from_slice(&salt);
    format!("{{SSHA}}{}", base64::engine::general_purpose::STANDARD.encode(raw))
}

/// Writes the LDIF; `with_base` includes the suffix and the two ous.
pub fn write(out: &mut impl Write, base: &str, users: usize, groups: usize, with_base: bool) -> std::io::Result<()> {
    if with_base {
        let dc = base.split(',').next().and_then(|r| r.split('=').nth(1)).unwrap_or("example");
        writeln!(
            out,
            "dn: {base}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: {dc}\no: {dc}\n"
        )?;
        writeln!(out, "dn: ou=people,{base}\nobjectClass: top\nobjectClass: organizationalUnit\nou: people\n")?;
        writeln!(out, "dn: ou=groups,{base}\nobjectClass: top\nobjectClass: organizationalUnit\nou: groups\n")?;
    }
    for i in 0..users {
        let (first, last) = (FIRST[i % FIRST.len()], LAST[(i / FIRST.len()) % LAST.len()]);
        writeln!(
            out,
            "dn: uid=user{i},ou=people,{base}\nobjectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n\
             objectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: user{i}\ncn: {first} {last} {i}\nsn: {last}\n\
             givenName: {first}\nmail: user{i}@example.com\nuidNumber: {}\ngidNumber: {}\nhomeDirectory: /home/user{i}\n\
             loginShell: /bin/bash\nuserPassword: {}\n",
            10000 + i,
            20000 + i % groups.max(1),
            ssha(&format!("pw{i}"), i)
        )?;
    }
    for g in 0..groups {
        if g % 2 == 0 {
            writeln!(out, "dn: cn=pgroup{g},ou=groups,{base}\nobjectClass: top\nobjectClass: posixGroup\ncn: pgroup{g}\ngidNumber: {}", 20000 + g)?;
            for i in (g..users).step_by(groups) {
                writeln!(out, "memberUid: user{i}")?;
            }
        } else {
            writeln!(
                out,
                "dn: cn=group{g},ou=groups,{base}\nobjectClass: top\nobjectClass: groupOfNames\ncn: group{g}"
            )?;
            let mut any = false;
            for i in (g..users).step_by(groups) {
                writeln!(out, "member: uid=user{i},ou=people,{base}")?;
                any = true;
            }
            if !any {
                writeln!(out, "member: cn=nobody")?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}
