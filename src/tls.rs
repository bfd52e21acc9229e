//! TLS: rustls (ring provider; TLS 1.2 and 1.3 only) through futures-rustls
//! on the glommio streams, for the `ldaps://` listener and StartTLS.
//!
//! One `ServerConfig` is shared by every shard behind an `ArcSwap`: a
//! handshake loads it without a lock, and SIGHUP swaps in a configuration
//! built from the files as they are now. Connections already established
//! keep their session; a reload that fails (a missing or mismatched file)
//! keeps the old certificate and says why.

use anyhow::{anyhow, Context, Result};
use arc_swap::ArcSwap;
use futures_rustls::rustls::pki_types::pem::PemObject;
use futures_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use futures_rustls::rustls::{self, ServerConfig, ServerConnection};
use futures_rustls::TlsAcceptor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Tls {
    config: ArcSwap<ServerConfig>,
    cert: PathBuf,
    key: PathBuf,
}

impl Tls {
    pub fn load(cert: &Path, key: &Path) -> Result<Tls> {
        let config = server_config(cert, key)?;
        Ok(Tls { config: ArcSwap::from(config), cert: cert.to_path_buf(), key: key.to_path_buf() })
    }

    /// Re-reads the certificate and key files.
    pub fn reload(&self) -> Result<()> {
        self.config.store(server_config(&self.cert, &self.key)?);
        Ok(())
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.load_full())
    }
}

fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("tls.certificate_file: reading {}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("tls.certificate_file: {}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("tls.certificate_file: {} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| anyhow!("tls.key_file: {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| anyhow!("tls: the certificate and key do not make a usable pair: {e}"))?;
    Ok(Arc::new(config))
}

/// The security strength factor of an established session, as slapd
/// reports it: the cipher's key size in bits.
pub fn ssf(session: &ServerConnection) -> u32 {
    match session.negotiated_cipher_suite() {
        Some(s) if format!("{:?}", s.suite()).contains("AES_128") => 128,
        Some(_) => 256,
        None => 0,
    }
}
