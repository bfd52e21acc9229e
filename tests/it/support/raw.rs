//! Raw LDAP messages: requests built by hand, BER pieces, and a client that
//! sends and reads them as they are.

use super::Server;
use bytes::BytesMut;
use ldap3_proto::proto::LdapMsg;
use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapDerefAliases, LdapExtendedRequest, LdapFilter, LdapOp, LdapSearchRequest,
    LdapSearchScope, OID_WHOAMI,
};
use ldap3_proto::LdapCodec;
use std::net::TcpStream;
use std::time::Duration;
use tokio_util::codec::{Decoder, Encoder};

/// A search for every entry in scope, all attributes.
pub fn search(base: &str, scope: LdapSearchScope) -> LdapOp {
    LdapOp::SearchRequest(LdapSearchRequest {
        base: base.into(),
        scope,
        aliases: LdapDerefAliases::Never,
        sizelimit: 0,
        timelimit: 0,
        typesonly: false,
        filter: LdapFilter::Present("objectClass".into()),
        attrs: vec![],
    })
}

/// A simple bind.
pub fn bind(dn: &str, pw: &str) -> LdapOp {
    LdapOp::BindRequest(LdapBindRequest { version: 3, dn: dn.into(), cred: LdapBindCred::Simple(pw.into()) })
}

pub fn whoami() -> LdapOp {
    LdapOp::ExtendedRequest(LdapExtendedRequest { name: OID_WHOAMI.into(), value: None })
}

/// A BER length field.
pub fn ber_len(n: usize, out: &mut Vec<u8>) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = (n as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// A BER element: tag, length, content.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    ber_len(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

/// Messages as the bytes a client sends.
pub fn encode_msgs(msgs: Vec<LdapMsg>) -> Vec<u8> {
    let mut out = BytesMut::new();
    for m in msgs {
        LdapCodec::default().encode(m, &mut out).unwrap();
    }
    out.to_vec()
}

/// A byte stream a `Raw` client can use.
pub trait Stream: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> Stream for T {}

/// An LDAP client that sends and reads raw messages, over TCP or TLS.
pub struct Raw {
    pub sock: Box<dyn Stream>,
    buf: BytesMut,
}

impl Raw {
    pub fn connect(s: &Server) -> Raw {
        let sock = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Raw::over(sock)
    }

    pub fn over(sock: impl Stream + 'static) -> Raw {
        Raw { sock: Box::new(sock), buf: BytesMut::new() }
    }

    pub fn send(&mut self, msgs: Vec<LdapMsg>) {
        self.sock.write_all(&encode_msgs(msgs)).unwrap();
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    /// The next message, or None once the server closed the connection.
    pub fn recv(&mut self) -> Option<LdapMsg> {
        let mut codec = LdapCodec::new(Some(64 << 20), None);
        loop {
            if let Some(m) = codec.decode(&mut self.buf).unwrap() {
                return Some(m);
            }
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

impl Raw {
    /// The next whole message's bytes, undecoded; None once closed.
    pub fn recv_frame(&mut self) -> Option<BytesMut> {
        loop {
            if let coredir::ber::Peeked::Size(n) = coredir::ber::peek_frame(&self.buf) {
                if self.buf.len() >= n {
                    return Some(self.buf.split_to(n));
                }
            }
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next message, skipping those ldap3_proto 0.9 cannot decode: the
    /// Sync Info `newcookie` in its RFC form (a primitive `[0]`).
    pub fn recv_lenient(&mut self) -> Option<LdapMsg> {
        let mut codec = LdapCodec::new(Some(64 << 20), None);
        loop {
            if let coredir::ber::Peeked::Size(n) = coredir::ber::peek_frame(&self.buf) {
                if self.buf.len() >= n {
                    let mut one = self.buf.split_to(n);
                    match codec.decode(&mut one) {
                        Ok(Some(m)) => return Some(m),
                        _ => continue,
                    }
                }
            }
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}
