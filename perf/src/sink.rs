//! `coredir-perf sink`: the floor. A trivial LDAP responder on one thread
//! and one epoll loop that answers every bind with success and every search
//! with one fixed entry (the request's base as its DN) and success, in
//! valid LDAPv3 framing, without looking at the request beyond its message
//! id, its operation tag and a search's base. What it costs per request is
//! what this kernel and loopback cost: the distance from a server to it is
//! what the server itself spends. All responses to the requests one read
//! brought are sent with one write. An unbind or any other operation
//! closes the connection.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3390")]
    listen: String,
}

/// The entry's one attribute, `objectClass: top`, as a PartialAttributeList.
const ATTRS: &[u8] = &[
    0x30, 0x16, 0x30, 0x14, 0x04, 0x0b, b'o', b'b', b'j', b'e', b'c', b't', b'C', b'l', b'a', b's', b's', 0x31, 0x05,
    0x04, 0x03, b't', b'o', b'p',
];

/// The longest request accepted; a longer one closes the connection.
const MAX_REQUEST: usize = 64 << 10;

struct Peer {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

pub fn run(args: Args) -> Result<()> {
    let listener = TcpListener::bind(&args.listen).with_context(|| format!("binding {}", args.listen))?;
    listener.set_nonblocking(true)?;
    println!("coredir-perf sink: listening on {}", listener.local_addr()?);
    // SAFETY: plain epoll calls on descriptors this function owns.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epoll < 0 {
        bail!("epoll_create1: {}", std::io::Error::last_os_error());
    }
    watch(epoll, listener.as_raw_fd(), u64::MAX)?;
    let mut peers: HashMap<u64, Peer> = HashMap::new();
    let mut next = 0u64;
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        // SAFETY: `events` outlives the call and holds its length.
        let n = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), events.len() as i32, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            bail!("epoll_wait: {e}");
        }
        for ev in &events[..n as usize] {
            let token = ev.u64;
            if token == u64::MAX {
                while let Ok((stream, _)) = listener.accept() {
                    stream.set_nonblocking(true)?;
                    stream.set_nodelay(true)?;
                    watch(epoll, stream.as_raw_fd(), next)?;
                    peers.insert(next, Peer { stream, input: Vec::with_capacity(4096), output: Vec::new() });
                    next += 1;
                }
                continue;
            }
            let keep = peers.get_mut(&token).is_some_and(serve);
            if !keep {
                // Closing the descriptor takes it out of the epoll set.
                peers.remove(&token);
            }
        }
    }
}

fn watch(epoll: i32, fd: i32, token: u64) -> Result<()> {
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
    // SAFETY: a valid epoll descriptor, a valid fd and an event we own.
    if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        bail!("epoll_ctl: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads what arrived, answers every whole request in it with one write;
/// false when the connection is done.
fn serve(p: &mut Peer) -> bool {
    let mut buf = [0u8; 16 << 10];
    loop {
        match p.stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => p.input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    let mut used = 0;
    let mut open = true;
    while let Some((len, msgid, op, base)) = request(&p.input[used..]) {
        match op {
            0x60 => respond(&mut p.output, msgid, 0x61),
            0x63 => {
                let mut entry = Vec::with_capacity(base.len() + ATTRS.len() + 4);
                tlv(&mut entry, 0x04, base);
                entry.extend_from_slice(ATTRS);
                message(&mut p.output, msgid, 0x64, &entry);
                respond(&mut p.output, msgid, 0x65);
            }
            _ => {
                open = false;
                break;
            }
        }
        used += len;
    }
    p.input.drain(..used);
    if p.input.len() > MAX_REQUEST {
        return false;
    }
    if !p.output.is_empty() {
        // Loopback with small responses: a short write is not expected; a
        // blocked one ends the connection rather than buffer for it.
        let ok = p.stream.write_all(&p.output).is_ok();
        p.output.clear();
        open &= ok;
    }
    open
}

/// One whole LDAPMessage at the start of `b`: its length, message id,
/// operation tag and (a search's) base DN.
fn request(b: &[u8]) -> Option<(usize, i64, u8, &[u8])> {
    if b.first() != Some(&0x30) {
        return (!b.is_empty()).then_some((b.len(), 0, 0, &[]));
    }
    let (body, end) = element(b)?;
    let (id_tag, id, rest) = field(body)?;
    if id_tag != 0x02 {
        return Some((end, 0, 0, &[]));
    }
    let msgid = id.iter().fold(0i64, |v, d| (v << 8) | *d as i64);
    let op = *rest.first()?;
    let base = match op {
        0x63 => field(element(rest)?.0).map(|(_, base, _)| base).unwrap_or(&[]),
        _ => &[],
    };
    Some((end, msgid, op, base))
}

/// The content of the element at the start of `b` and where it ends.
fn element(b: &[u8]) -> Option<(&[u8], usize)> {
    let first = *b.get(1)?;
    let (len, head) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let len = b.get(2..2 + n)?.iter().fold(0usize, |v, d| (v << 8) | *d as usize);
        (len, 2 + n)
    };
    Some((b.get(head..head + len)?, head + len))
}

/// The tag, content and what follows of the first element of `b`.
fn field(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (content, end) = element(b)?;
    Some((b[0], content, &b[end..]))
}

fn tlv(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    match content.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend_from_slice(&[0x81, n as u8]),
        n => out.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
}

fn message(out: &mut Vec<u8>, msgid: i64, op: u8, body: &[u8]) {
    let mut inner = Vec::with_capacity(body.len() + 8);
    let id = msgid.to_be_bytes();
    let skip = id.iter().take(7).take_while(|b| **b == 0).count();
    let id = &id[skip..];
    let id: Vec<u8> = if id[0] & 0x80 != 0 { [&[0u8][..], id].concat() } else { id.to_vec() };
    tlv(&mut inner, 0x02, &id);
    tlv(&mut inner, op, body);
    tlv(out, 0x30, &inner);
}

/// An LDAPResult of success (empty matchedDN and diagnostic).
fn respond(out: &mut Vec<u8>, msgid: i64, op: u8) {
    message(out, msgid, op, &[0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00]);
}
