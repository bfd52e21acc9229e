//! `EntryState`'s stored form (the `state` tree, moves' parcels, resyncs):
//! u32 little-endian counts and lengths.

use super::{AttrState, EntryState, ValueState};
use crate::csn::Csn;
use std::collections::BTreeMap;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

pub fn encode_state(s: &EntryState, out: &mut Vec<u8>) {
    out.extend_from_slice(&s.created.to_bytes());
    match &s.dn {
        Some((dn, csn)) => {
            out.push(1);
            out.extend_from_slice(&csn.to_bytes());
            put_bytes(out, dn.as_bytes());
        }
        None => out.push(0),
    }
    match s.deleted {
        Some(csn) => {
            out.push(1);
            out.extend_from_slice(&csn.to_bytes());
        }
        None => out.push(0),
    }
    match &s.conflict {
        Some((lost, slot)) => {
            out.push(1);
            put_bytes(out, lost.as_bytes());
            out.extend_from_slice(&slot.to_le_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(s.attrs.len() as u32).to_le_bytes());
    for (key, a) in &s.attrs {
        put_bytes(out, key.as_bytes());
        put_bytes(out, a.name.as_bytes());
        out.extend_from_slice(&a.order.0.to_bytes());
        out.extend_from_slice(&a.order.1.to_le_bytes());
        out.extend_from_slice(&a.cleared.to_bytes());
        out.extend_from_slice(&(a.values.len() as u32).to_le_bytes());
        for (norm, v) in &a.values {
            put_bytes(out, norm);
            put_bytes(out, &v.value);
            out.extend_from_slice(&v.added.to_bytes());
            out.extend_from_slice(&v.pos.to_le_bytes());
            out.extend_from_slice(&v.deleted.to_bytes());
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()?;
        self.take(n).map(<[u8]>::to_vec)
    }
    fn text(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?).ok()
    }
    fn csn(&mut self) -> Option<Csn> {
        Csn::from_bytes(self.take(16)?)
    }
    fn flag(&mut self) -> Option<bool> {
        Some(self.take(1)?[0] == 1)
    }
}

pub fn decode_state(b: &[u8]) -> Option<EntryState> {
    let mut r = Reader(b);
    let created = r.csn()?;
    let dn = if r.flag()? {
        let csn = r.csn()?;
        Some((r.text()?, csn))
    } else {
        None
    };
    let deleted = if r.flag()? { Some(r.csn()?) } else { None };
    let conflict = if r.flag()? { Some((r.text()?, u32::from_le_bytes(r.take(4)?.try_into().ok()?))) } else { None };
    let mut attrs = BTreeMap::new();
    for _ in 0..r.u32()? {
        let key = r.text()?;
        let name = r.text()?;
        let order = (r.csn()?, u16::from_le_bytes(r.take(2)?.try_into().ok()?));
        let cleared = r.csn()?;
        let mut values = BTreeMap::new();
        for _ in 0..r.u32()? {
            let norm = r.bytes()?;
            let value = r.bytes()?;
            let added = r.csn()?;
            let pos = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
            values.insert(norm, ValueState { value, added, pos, deleted: r.csn()? });
        }
        attrs.insert(key, AttrState { name, order, cleared, values });
    }
    r.0.is_empty().then_some(EntryState { created, dn, deleted, conflict, attrs })
}
