//! The channel's frames, the facts both sides must agree on, the proof of
//! the secret and the framing (a 4-byte length, then JSON), over TCP or TLS.

use super::*;

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Frame {
    Challenge {
        nonce: [u8; 16],
        facts: Facts,
    },
    Hello {
        proof: Vec<u8>,
        facts: Facts,
    },
    /// Per origin, per partition: the last sequence number held.
    Ruv {
        applied: Vec<(Origin, Vec<u64>)>,
    },
    Refuse {
        reason: String,
    },
    /// (partition, origin, sequence number, record in base64).
    Records {
        records: Vec<(u16, Origin, u64, String)>,
        /// Every change of the sender's own with a CSN up to this one is
        /// in this frame or an earlier one (`sender::settled`); absent
        /// from a sender before it.
        #[serde(default)]
        settled: Option<String>,
    },
    Ack {
        applied: Vec<(u16, Origin, u64)>,
    },
    Heartbeat {
        backlog: u64,
        /// As for `Records`: nothing of the sender's own up to it is unsent.
        #[serde(default)]
        settled: Option<String>,
    },
    /// A resync: entry states of a partition (entryUUID, state in base64),
    /// joined into the receiver's (`Shard::absorb`).
    States {
        partition: u16,
        states: Vec<([u8; 16], String)>,
    },
    /// A resync's end: the positions the states cover, per origin.
    Resynced {
        partition: u16,
        positions: Vec<(Origin, u64)>,
        /// The sender's newest CSN per server id in the partition
        /// (`changelog::newest`): the receiver's contextCSN reaches it
        /// though no record came. Absent from a sender before 2026-12-04.
        #[serde(default)]
        newest: Vec<String>,
    },
    /// The anti-entropy check (`crate::verify`): the sender asks for the
    /// receiver's digest of a partition (`Digested`: `None` when its
    /// vector moved while it summed).
    Digest {
        partition: u16,
    },
    Digested {
        summary: Option<verify::Summary>,
    },
    /// A divergence report's question: per entry of the partition, its
    /// DN and the head of its hash (answered by `HashList`).
    Hashes {
        partition: u16,
    },
    HashList {
        entries: Vec<(String, String)>,
    },
}

/// What both sides of a pair must agree on, and who they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Facts {
    pub(super) server_id: u16,
    pub(super) incarnation: u32,
    pub(super) database_id: String,
    pub(super) partitions: u32,
    pub(super) hash: String,
    /// The naming contexts served (absent from peers before 2026-12-02).
    #[serde(default)]
    pub(super) suffixes: Vec<String>,
    /// The channel's protocol: 2 answers `Frame::Digest` and takes
    /// `Change::Conflict` records (0: peers before 2026-12-02); 3 says
    /// what it has settled (`Frame::Records::settled`).
    #[serde(default)]
    pub(super) protocol: u32,
}

pub(super) fn facts(ctx: &Ctx, config: &Config) -> Facts {
    let m = &ctx.shard.manifest;
    Facts {
        server_id: config.sid(),
        incarnation: m.incarnation,
        database_id: m.database_id.clone(),
        partitions: m.partitions,
        hash: m.hash.clone(),
        suffixes: ctx.suffixes.iter().map(Dn::to_string_form).collect(),
        protocol: PROTOCOL,
    }
}

/// Why a peer's facts rule it out, if they do.
pub(super) fn mismatch(ours: &Facts, theirs: &Facts) -> Option<String> {
    if theirs.server_id == ours.server_id {
        return Some(format!("the peer has this server's id {}", ours.server_id));
    }
    if theirs.database_id != ours.database_id {
        return Some(format!(
            "the peer holds another database ({} here, {} there); seed it from a backup of this one",
            ours.database_id, theirs.database_id
        ));
    }
    if (theirs.partitions, &theirs.hash) != (ours.partitions, &ours.hash) {
        return Some(format!(
            "the peer partitions differently ({} by {} here, {} by {} there)",
            ours.partitions, ours.hash, theirs.partitions, theirs.hash
        ));
    }
    let contexts = |f: &Facts| -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = f.suffixes.iter().filter_map(|s| Dn::parse(s).ok()).map(|d| d.key()).collect();
        keys.sort();
        keys
    };
    if !theirs.suffixes.is_empty() && contexts(theirs) != contexts(ours) {
        return Some(format!(
            "the peer serves other naming contexts ({} here, {} there); configure the same directory.suffixes",
            ours.suffixes.join("; "),
            theirs.suffixes.join("; ")
        ));
    }
    None
}

pub(super) fn proof(secret: &str, nonce: &[u8; 16]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"coredir replication\0");
    h.update(secret.as_bytes());
    h.update(nonce);
    h.finalize().to_vec()
}

/// The channel's byte stream: TCP, or TLS over it.
pub(super) trait Io: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Io for T {}
pub(super) type Stream = Box<dyn Io>;

/// A new connection's stream: with `replication.peer_certificate_sha256`,
/// TLS 1.3 with both certificates pinned, before any frame.
pub(super) async fn secure(tcp: TcpStream, shared: &Link, inbound: bool) -> Result<Stream> {
    tcp.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
    let Some(tls) = shared.tls.get() else { return Ok(Box::new(tcp)) };
    Ok(if inbound {
        Box::new(tls.acceptor.accept(tcp).await.map_err(|e| anyhow!("TLS: {e}"))?)
    } else {
        let name = futures_rustls::rustls::pki_types::ServerName::try_from("coredir-peer").expect("a DNS name");
        Box::new(tls.connector.connect(name, tcp).await.map_err(|e| anyhow!("TLS: {e}"))?)
    })
}

pub(super) async fn send(stream: &mut Stream, frame: &Frame) -> Result<()> {
    let body = serde_json::to_vec(frame)?;
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    stream.write_all(&buf).await?;
    // TLS buffers what it encrypts.
    stream.flush().await?;
    Ok(())
}

pub(super) async fn recv(stream: &mut Stream, limit: usize) -> Result<Frame> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > limit {
        bail!("a {n}-byte frame is over the {limit}-byte limit");
    }
    let mut body = vec![0u8; n];
    stream.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}
