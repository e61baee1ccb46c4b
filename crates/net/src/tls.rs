//! TLS with pinned self-signed certificates (rustls with the `ring` provider, rcgen).
//!
//! The dealer generates one certificate and key for each of the two servers and for the
//! client ([`generate`]); every party then trusts exactly the certificates it is given —
//! no certificate authority, no names: a peer is accepted only if it presents one of the
//! pinned certificates byte for byte and proves it holds its key. Servers require a client
//! certificate, so only the client and the other server can use them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
};

use crate::NetError;

/// Who holds a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Server of party 0.
    Server0,
    /// Server of party 1.
    Server1,
    /// The client.
    Client,
}

impl Role {
    /// All roles.
    pub const ALL: [Role; 3] = [Role::Server0, Role::Server1, Role::Client];

    /// The server of `party` (0 or 1).
    pub fn server(party: u8) -> Role {
        if party == 0 { Role::Server0 } else { Role::Server1 }
    }

    /// File stem: `server0`, `server1` or `client`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Server0 => "server0",
            Role::Server1 => "server1",
            Role::Client => "client",
        }
    }
}

/// A certificate and its private key.
pub struct Identity {
    /// The certificate (DER).
    pub cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("cert_bytes", &self.cert.len()).finish_non_exhaustive()
    }
}

fn cert_err(path: &Path, reason: impl std::fmt::Display) -> NetError {
    NetError::Certificates { path: path.display().to_string(), reason: reason.to_string() }
}

fn cert_path(dir: &Path, role: Role) -> PathBuf {
    dir.join(format!("{}.pem", role.name()))
}

fn key_path(dir: &Path, role: Role) -> PathBuf {
    dir.join(format!("{}.key", role.name()))
}

/// Write a fresh certificate and key for each role into `dir` (`server0.pem`,
/// `server0.key`, …; keys readable by their owner only).
///
/// # Errors
/// [`NetError::Certificates`] if generation or writing fails.
pub fn generate(dir: &Path) -> Result<(), NetError> {
    std::fs::create_dir_all(dir).map_err(|e| cert_err(dir, e))?;
    #[cfg(unix)]
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| cert_err(dir, e))?;
    for role in Role::ALL {
        let ck = rcgen::generate_simple_self_signed(vec![format!("fusefss-{}", role.name())])
            .map_err(|e| cert_err(dir, e))?;
        let cp = cert_path(dir, role);
        std::fs::write(&cp, ck.cert.pem()).map_err(|e| cert_err(&cp, e))?;
        let kp = key_path(dir, role);
        write_private(&kp, ck.signing_key.serialize_pem().as_bytes()).map_err(|e| cert_err(&kp, e))?;
    }
    Ok(())
}

/// Write a private key readable by its owner only, whatever the umask, also when the file
/// exists already with wider permissions (reliability probe, defect 8).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(path)?;
    #[cfg(unix)]
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// The certificate of `role` in `dir`.
///
/// # Errors
/// [`NetError::Certificates`] if it is missing or not a PEM certificate.
pub fn load_cert(dir: &Path, role: Role) -> Result<CertificateDer<'static>, NetError> {
    let p = cert_path(dir, role);
    CertificateDer::from_pem_file(&p).map_err(|e| cert_err(&p, e))
}

/// The certificate and key of `role` in `dir`.
///
/// # Errors
/// [`NetError::Certificates`] if either is missing or malformed.
pub fn load_identity(dir: &Path, role: Role) -> Result<Identity, NetError> {
    let cert = load_cert(dir, role)?;
    let p = key_path(dir, role);
    let key = PrivatePkcs8KeyDer::from_pem_file(&p).map_err(|e| cert_err(&p, e))?;
    Ok(Identity { cert, key: key.into() })
}

/// ring's provider with AES-128-GCM first (10 AES rounds per block against AES-256-GCM's
/// 14, for the megabytes a query sends), at TLS 1.3's standard 128-bit level.
fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// Accepts exactly the pinned certificates.
#[derive(Debug)]
struct Pinned {
    certs: Vec<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

#[derive(Debug)]
struct NotPinned;

impl std::fmt::Display for NotPinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the peer's certificate is not one of the pinned fusefss certificates")
    }
}

impl std::error::Error for NotPinned {}

impl Pinned {
    fn new(certs: Vec<CertificateDer<'static>>) -> Arc<Pinned> {
        Arc::new(Pinned { certs, algs: provider().signature_verification_algorithms })
    }

    fn check(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
                NotPinned,
            )))))
        }
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity).map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity).map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// A client configuration that presents `me` and accepts only the server `pinned`.
///
/// # Errors
/// [`NetError::Tls`] if the key does not fit the certificate.
pub fn client_config(me: &Identity, pinned: CertificateDer<'static>) -> Result<Arc<ClientConfig>, NetError> {
    let c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Pinned::new(vec![pinned]))
        .with_client_auth_cert(vec![me.cert.clone()], me.key.clone_key())?;
    Ok(Arc::new(c))
}

/// A server configuration that presents `me` and requires a client certificate from
/// `accepted`.
///
/// # Errors
/// [`NetError::Tls`] if the key does not fit the certificate.
pub fn server_config(
    me: &Identity,
    accepted: Vec<CertificateDer<'static>>,
) -> Result<Arc<ServerConfig>, NetError> {
    let c = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Pinned::new(accepted))
        .with_single_cert(vec![me.cert.clone()], me.key.clone_key())?;
    Ok(Arc::new(c))
}

/// The client side of a connection to a pinned server.
///
/// # Errors
/// [`NetError::Tls`] for a bad configuration.
pub fn client_connection(config: Arc<ClientConfig>) -> Result<rustls::Connection, NetError> {
    let name = ServerName::try_from("fusefss").expect("a valid name");
    Ok(rustls::ClientConnection::new(config, name)?.into())
}

/// The server side of an accepted connection.
///
/// # Errors
/// [`NetError::Tls`] for a bad configuration.
pub fn server_connection(config: Arc<ServerConfig>) -> Result<rustls::Connection, NetError> {
    Ok(rustls::ServerConnection::new(config)?.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Conn, Transport};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fusefss-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Connect a client with identity `client` (pinning `server_cert`) to a server with
    /// identity `server` that accepts `accepted`.
    fn link(
        client: &Identity,
        server_cert: CertificateDer<'static>,
        server: &Identity,
        accepted: Vec<CertificateDer<'static>>,
    ) -> (Result<Conn, NetError>, Result<Conn, NetError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sc = server_config(server, accepted).unwrap();
        let t = Some(Duration::from_secs(5));
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Conn::tls(s, server_connection(sc).unwrap(), t, None)
        });
        let cc = client_config(client, server_cert).unwrap();
        let c = Conn::tls(TcpStream::connect(addr).unwrap(), client_connection(cc).unwrap(), t, None);
        (c, h.join().unwrap())
    }

    #[test]
    fn pinned_peers_talk_and_strangers_are_refused() {
        let (d, other) = (tmp("a"), tmp("b"));
        generate(&d).unwrap();
        generate(&other).unwrap();
        let s0 = load_identity(&d, Role::Server0).unwrap();
        let cl = load_identity(&d, Role::Client).unwrap();
        let c_cert = load_cert(&d, Role::Client).unwrap();

        let (c, s) = link(&cl, s0.cert.clone(), &s0, vec![c_cert.clone()]);
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        assert_eq!(s.peer_certificate(), Some(&c_cert));
        let big = vec![7u8; 3_000_000];
        let h = std::thread::spawn(move || {
            let got = s.exchange(b"hello").unwrap();
            (got, s)
        });
        assert_eq!(c.exchange(&big).unwrap(), b"hello");
        let (got, _s) = h.join().unwrap();
        assert_eq!(got, big);

        // A client from another dealer run: the server refuses it.
        let stranger = load_identity(&other, Role::Client).unwrap();
        let (c, s) = link(&stranger, s0.cert.clone(), &s0, vec![c_cert.clone()]);
        assert!(matches!(s, Err(NetError::Untrusted(_))), "the server must refuse an unpinned client");
        assert!(c.is_err() || c.unwrap().recv().is_err());

        // A server from another dealer run: the client refuses it.
        let impostor = load_identity(&other, Role::Server0).unwrap();
        let (c, _s) = link(&cl, s0.cert.clone(), &impostor, vec![c_cert]);
        let e = c.unwrap_err();
        assert!(matches!(e, NetError::Untrusted(_)), "{e}");
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&other);
    }

    /// A client may send its first message right behind its last handshake flight (one TCP
    /// segment here): the server decrypts it during the handshake and must still deliver it.
    #[test]
    fn a_message_that_arrives_with_the_handshake_is_delivered() {
        use std::io::{Read as _, Write as _};
        let d = tmp("early");
        generate(&d).unwrap();
        let s0 = load_identity(&d, Role::Server0).unwrap();
        let cl = load_identity(&d, Role::Client).unwrap();
        let c_cert = load_cert(&d, Role::Client).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let sc = server_config(&s0, vec![c_cert]).unwrap();
        let cc = client_config(&cl, s0.cert.clone()).unwrap();
        let client = std::thread::spawn(move || {
            let mut sock = TcpStream::connect(addr).unwrap();
            let mut c = client_connection(cc).unwrap();
            while c.is_handshaking() {
                while c.wants_write() {
                    c.write_tls(&mut sock).unwrap();
                }
                c.read_tls(&mut sock).unwrap();
                c.process_new_packets().unwrap();
            }
            // The client's Finished is still queued: put a frame behind it, send both at once.
            let mut frame = 5u64.to_le_bytes().to_vec();
            frame.extend_from_slice(b"hello");
            c.writer().write_all(&frame).unwrap();
            let mut out = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut out).unwrap();
            }
            sock.write_all(&out).unwrap();
            // Hold the socket open until the server is done.
            let _ = sock.read(&mut [0u8; 1]);
        });
        let (s, _) = l.accept().unwrap();
        let mut s = Conn::tls(s, server_connection(sc).unwrap(), Some(Duration::from_secs(2)), None).unwrap();
        assert_eq!(s.recv().unwrap(), b"hello");
        drop(s);
        client.join().unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn missing_or_bad_files_are_errors() {
        let d = tmp("c");
        assert!(matches!(load_identity(&d, Role::Client), Err(NetError::Certificates { .. })));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("client.pem"), "not a certificate").unwrap();
        assert!(matches!(load_cert(&d, Role::Client), Err(NetError::Certificates { .. })));
        let _ = std::fs::remove_dir_all(&d);
    }
}
