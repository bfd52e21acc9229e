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
use futures_rustls::rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use futures_rustls::rustls::{self, ServerConfig, ServerConnection};
use futures_rustls::TlsAcceptor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Tls {
    config: ArcSwap<ServerConfig>,
    cert: PathBuf,
    key: PathBuf,
    clients: Option<Clients>,
}

/// Client certificates asked for (`tls.verify_client` other than
/// `never`): the CAs trusted, and whether one is required.
#[derive(Clone)]
struct Clients {
    ca: PathBuf,
    demand: bool,
    /// `tls.crl_file`.
    crl: Option<PathBuf>,
}

impl Tls {
    /// From `tls`'s certificate_file and key_file, which must both be set.
    pub fn load(tls: &crate::config::TlsConfig) -> Result<Tls> {
        let (Some(cert), Some(key)) = (&tls.certificate_file, &tls.key_file) else {
            anyhow::bail!("tls: certificate_file and key_file go together");
        };
        let clients = match (tls.client_demand()?, &tls.ca_certificate_file) {
            (None, _) => None,
            (Some(_), None) => anyhow::bail!("tls.verify_client: client certificates need tls.ca_certificate_file"),
            (Some(demand), Some(ca)) => Some(Clients { ca: ca.clone(), demand, crl: tls.crl_file.clone() }),
        };
        let config = server_config(cert, key, clients.as_ref())?;
        Ok(Tls { config: ArcSwap::from(config), cert: cert.clone(), key: key.clone(), clients })
    }

    /// Re-reads the certificate, key and CA files.
    pub fn reload(&self) -> Result<()> {
        self.config.store(server_config(&self.cert, &self.key, self.clients.as_ref())?);
        Ok(())
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.load_full())
    }
}

/// A certificate chain and its key, from PEM files.
fn identity(cert: &Path, key: &Path) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("tls.certificate_file: reading {}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("tls.certificate_file: {}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("tls.certificate_file: {} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| anyhow!("tls.key_file: {}: {e}", key.display()))?;
    Ok((certs, key))
}

fn server_config(cert: &Path, key: &Path, clients: Option<&Clients>) -> Result<Arc<ServerConfig>> {
    let (certs, key) = identity(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(clients) => builder.with_client_cert_verifier(client_verifier(clients, provider)?),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow!("tls: the certificate and key do not make a usable pair: {e}"))?;
    Ok(Arc::new(config))
}

/// Verifies client certificates against the CAs of `tls.ca_certificate_file`.
fn client_verifier(
    clients: &Clients,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>> {
    let ca = &clients.ca;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)
        .with_context(|| format!("tls.ca_certificate_file: reading {}", ca.display()))?
    {
        let cert = cert.map_err(|e| anyhow!("tls.ca_certificate_file: {}: {e}", ca.display()))?;
        roots.add(cert).map_err(|e| anyhow!("tls.ca_certificate_file: {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        anyhow::bail!("tls.ca_certificate_file: {} holds no certificate", ca.display());
    }
    let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = if clients.demand { builder } else { builder.allow_unauthenticated() };
    let builder = match &clients.crl {
        // Only the certificates an issuer's list names are refused: one
        // whose issuer has no list passes, as with slapd on GnuTLS.
        Some(file) => builder.with_crls(revocation_lists(file)?).allow_unknown_revocation_status(),
        None => builder,
    };
    builder.build().map_err(|e| anyhow!("tls.ca_certificate_file: {}: {e}", ca.display()))
}

/// The certificate revocation lists of `tls.crl_file` (PEM).
fn revocation_lists(file: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let crls = CertificateRevocationListDer::pem_file_iter(file)
        .with_context(|| format!("tls.crl_file: reading {}", file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("tls.crl_file: {}: {e}", file.display()))?;
    if crls.is_empty() {
        anyhow::bail!(
            "tls.crl_file: {} holds no certificate revocation list (PEM; convert DER with `openssl crl -inform DER`)",
            file.display()
        );
    }
    // Only the first list of each CA would be checked (GnuTLS checks them
    // all): a CA's older list before its newer one would let what only
    // the newer revokes through.
    let mut issuers: Vec<Vec<u8>> = Vec::with_capacity(crls.len());
    for (i, der) in crls.iter().enumerate() {
        let list = webpki::BorrowedCertRevocationList::from_der(der)
            .map_err(|e| anyhow!("tls.crl_file: {}: list {}: {e:?}", file.display(), i + 1))?;
        let issuer = webpki::CertRevocationList::from(list).issuer().to_vec();
        if issuers.contains(&issuer) {
            anyhow::bail!(
                "tls.crl_file: {} holds two lists of one CA (list {}); keep only its newest",
                file.display(),
                i + 1
            );
        }
        issuers.push(issuer);
    }
    Ok(crls)
}

/// The subject of a verified client certificate as slapd names it to
/// SASL EXTERNAL and matches `authz-regexp` against: the LDAP form (RFC
/// 4514, the most specific RDN first, types by OID) normalized as its
/// `dnNormalize` does (`cn=client one,ou=people,o=example`). `None`
/// without a certificate, for an empty subject (slapd sets no identity),
/// or for one the schema cannot name.
pub fn client_subject(session: &ServerConnection) -> Option<String> {
    let der = session.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let mut avas = Vec::new();
        for ava in rdn.iter() {
            let mut text = format!("{}=", ava.attr_type().to_id_string());
            shards::dn::escape_value(subject_value(ava.attr_value())?.as_bytes(), &mut text);
            avas.push(text);
        }
        rdns.push(avas.join("+"));
    }
    if rdns.is_empty() {
        return None;
    }
    rdns.reverse();
    shards::dn::Dn::parse(&rdns.join(",")).and_then(|dn| dn.normalized()).ok()
}

/// A subject attribute's value as UTF-8, from the string types
/// certificates use, as libldap decodes them: BMPString is UTF-16,
/// UniversalString UCS-4, TeletexString taken as Latin-1.
fn subject_value(value: &x509_parser::asn1_rs::Any<'_>) -> Option<String> {
    use x509_parser::asn1_rs::Tag;
    let data = value.data;
    match value.tag() {
        Tag::BmpString => char::decode_utf16(data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
            .collect::<Result<String, _>>()
            .ok(),
        Tag::UniversalString => data
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect::<Option<String>>(),
        Tag::TeletexString => Some(data.iter().map(|b| *b as char).collect()),
        _ => std::str::from_utf8(data).ok().map(str::to_string),
    }
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

// ---- The replication channel: mutual TLS with pinned certificates.

/// Both ends of the replication channel over TLS: each side presents its
/// certificate and accepts only the peer's, by its SHA-256 fingerprint
/// (no CA: a pair of servers trusts exactly each other, as kanidm's
/// replication does).
pub struct Channel {
    pub acceptor: TlsAcceptor,
    pub connector: futures_rustls::TlsConnector,
}

/// A SHA-256 fingerprint in hex, with or without colons (as `openssl x509
/// -noout -fingerprint -sha256` prints it).
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32]> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect();
    bytes
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| anyhow!("replication.peer_certificate_sha256: {text:?} is not a SHA-256 fingerprint in hex"))
}

/// The fingerprint of the first certificate in a PEM file.
pub fn fingerprint_of(cert: &Path) -> Result<String> {
    let first = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .next()
        .ok_or_else(|| anyhow!("{} holds no certificate", cert.display()))?
        .map_err(|e| anyhow!("{}: {e}", cert.display()))?;
    Ok(sha256_hex(&first))
}

fn sha256_hex(cert: &CertificateDer<'_>) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(cert.as_ref()).iter().map(|b| format!("{b:02x}")).collect()
}

pub fn channel(cert: &Path, key: &Path, pin: [u8; 32]) -> Result<Channel> {
    let (certs, key) = identity(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pinned = Arc::new(Pinned { pin, provider: provider.clone() });
    let versions = [&rustls::version::TLS13];
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)?
        .with_client_cert_verifier(pinned.clone())
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| anyhow!("replication: the certificate and key do not make a usable pair: {e}"))?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)?
        .dangerous()
        .with_custom_certificate_verifier(pinned)
        .with_client_auth_cert(certs, key)
        .map_err(|e| anyhow!("replication: the certificate and key do not make a usable pair: {e}"))?;
    Ok(Channel {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: futures_rustls::TlsConnector::from(Arc::new(client)),
    })
}

/// Accepts one certificate: the peer's, by fingerprint. Signatures are
/// checked as rustls always does.
#[derive(Debug)]
struct Pinned {
    pin: [u8; 32],
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl Pinned {
    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        use sha2::Digest;
        if sha2::Sha256::digest(cert.as_ref()).as_slice() == self.pin {
            Ok(())
        } else {
            Err(rustls::Error::General(format!(
                "the peer's certificate (SHA-256 {}) is not the one replication.peer_certificate_sha256 pins",
                sha256_hex(cert)
            )))
        }
    }

    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.check(end_entity).map(|_| rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

impl rustls::server::danger::ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.check(end_entity).map(|_| rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
