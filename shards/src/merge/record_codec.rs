//! The wire and changelog form of a `Record`.

use super::{Change, Delta, Record};
use crate::csn::Csn;

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn values(out: &mut Vec<u8>, vs: &[Vec<u8>]) {
    out.extend_from_slice(&(vs.len() as u32).to_le_bytes());
    vs.iter().for_each(|v| bytes(out, v));
}

fn encode_deltas(out: &mut Vec<u8>, deltas: &[Delta]) {
    out.extend_from_slice(&(deltas.len() as u32).to_le_bytes());
    for d in deltas {
        let (tag, attr, vs): (u8, &str, &[Vec<u8>]) = match d {
            Delta::Add { attr, values } => (0, attr, values),
            Delta::Delete { attr, values } => (1, attr, values),
            Delta::Clear { attr } => (2, attr, &[]),
        };
        out.push(tag);
        bytes(out, attr.as_bytes());
        values(out, vs);
    }
}

/// The wire and changelog form of a record: a version byte, the CSN and
/// UUID, then the change, with `u32` little-endian lengths.
impl Record {
    const VERSION: u8 = 1;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(Self::VERSION);
        out.extend_from_slice(&self.csn.to_bytes());
        out.extend_from_slice(&self.uuid);
        bytes(out, self.dn.as_bytes());
        match &self.change {
            Change::Add { attrs } => {
                out.push(0);
                out.extend_from_slice(&(attrs.len() as u32).to_le_bytes());
                for (name, vs) in attrs {
                    bytes(out, name.as_bytes());
                    values(out, vs);
                }
            }
            Change::Modify { deltas } => {
                out.push(1);
                encode_deltas(out, deltas);
            }
            Change::Rename { to, deltas } => {
                out.push(2);
                bytes(out, to.as_bytes());
                encode_deltas(out, deltas);
            }
            Change::Delete => out.push(3),
            Change::Conflict { slot } => {
                out.push(4);
                out.extend_from_slice(&slot.to_le_bytes());
            }
        }
    }

    /// The DNs a record in its encoded form renames from and to, read
    /// without decoding the rest (a sender looks at every record it holds
    /// for the members of a move); None for any other change.
    pub fn renamed_dns(b: &[u8]) -> Option<(&str, &str)> {
        fn text<'a>(b: &'a [u8], at: usize) -> Option<(&'a str, usize)> {
            let n = u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?) as usize;
            let end = (at + 4).checked_add(n)?;
            Some((std::str::from_utf8(b.get(at + 4..end)?).ok()?, end))
        }
        if b.first() != Some(&Self::VERSION) {
            return None;
        }
        let (from, tag) = text(b, 1 + 16 + 16)?;
        (*b.get(tag)? == 2).then_some(())?;
        Some((from, text(b, tag + 1)?.0))
    }

    pub fn decode(mut b: &[u8]) -> Option<Record> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (b.get(..n)?, b.get(n..)?);
            *b = rest;
            Some(head)
        }
        fn len(b: &mut &[u8]) -> Option<usize> {
            Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize)
        }
        fn bytes(b: &mut &[u8]) -> Option<Vec<u8>> {
            let n = len(b)?;
            take(b, n).map(<[u8]>::to_vec)
        }
        fn text(b: &mut &[u8]) -> Option<String> {
            String::from_utf8(bytes(b)?).ok()
        }
        fn values(b: &mut &[u8]) -> Option<Vec<Vec<u8>>> {
            let n = len(b)?;
            // Every value takes at least its 4-byte length: bound the allocation.
            (n <= b.len() / 4).then_some(())?;
            (0..n).map(|_| bytes(b)).collect()
        }
        fn deltas(b: &mut &[u8]) -> Option<Vec<Delta>> {
            let n = len(b)?;
            (n <= b.len() / 9).then_some(())?;
            (0..n)
                .map(|_| {
                    let tag = take(b, 1)?[0];
                    let (attr, values) = (text(b)?, values(b)?);
                    match tag {
                        0 => Some(Delta::Add { attr, values }),
                        1 => Some(Delta::Delete { attr, values }),
                        2 => Some(Delta::Clear { attr }),
                        _ => None,
                    }
                })
                .collect()
        }
        if take(&mut b, 1)? != [Self::VERSION] {
            return None;
        }
        let csn = Csn::from_bytes(take(&mut b, 16)?)?;
        let uuid: [u8; 16] = take(&mut b, 16)?.try_into().ok()?;
        let dn = text(&mut b)?;
        let change = match take(&mut b, 1)?[0] {
            0 => {
                let n = len(&mut b)?;
                (n <= b.len() / 8).then_some(())?;
                let attrs = (0..n).map(|_| Some((text(&mut b)?, values(&mut b)?))).collect::<Option<_>>()?;
                Change::Add { attrs }
            }
            1 => Change::Modify { deltas: deltas(&mut b)? },
            2 => Change::Rename { to: text(&mut b)?, deltas: deltas(&mut b)? },
            3 => Change::Delete,
            4 => Change::Conflict { slot: len(&mut b)? as u32 },
            _ => return None,
        };
        b.is_empty().then_some(Record { csn, uuid, dn, change })
    }
}
