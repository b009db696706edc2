//! A private certificate authority made at test time (`rcgen`: no CA key
//! is committed), a certificate for 127.0.0.1 that only it signs, and a TLS
//! front (tokio-rustls) that shows that certificate and passes each
//! connection on to a plain server — HTTPS in front of any wiremock fake.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA of the test's own, and the server certificate it signed, written
/// as PEM files: `ca.pem` (what `[tls] ca_file` names), `server.pem` and
/// `server.key` (what a Python server loads).
pub struct PrivateCa {
    dir: tempfile::TempDir,
    server_cert: CertificateDer<'static>,
    server_key: Vec<u8>,
}

impl PrivateCa {
    /// A new CA, and a certificate for `127.0.0.1` and `localhost` it signed.
    pub fn new() -> PrivateCa {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "agent-harness tests' private CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();

        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let server = params.signed_by(&key, &ca).unwrap();

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        PrivateCa {
            dir,
            server_cert: server.der().clone(),
            server_key: key.serialize_der(),
        }
    }

    /// What `openssl req -x509` makes by default: a self-signed certificate
    /// for `127.0.0.1` that says it is a CA (`CA:TRUE`), shown by the
    /// server as its own; `ca.pem` is that same certificate.
    pub fn self_signed_as_a_ca() -> PrivateCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        PrivateCa {
            dir,
            server_cert: cert.der().clone(),
            server_key: key.serialize_der(),
        }
    }

    /// The CA's certificate, PEM.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The server's certificate, PEM.
    pub fn server_cert_file(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// The server's key, PEM.
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// `[tls]` trusting this CA.
    pub fn tls_section(&self) -> String {
        format!("[tls]\nca_file = \"{}\"\n", self.ca_file().display())
    }

    fn server_config(&self) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.server_cert.clone()], key)
            .unwrap()
    }
}

/// HTTPS on 127.0.0.1 with [`PrivateCa`]'s server certificate, each
/// connection passed on to a plain server; it stops when dropped.
pub struct TlsFront {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    /// A front for the plain server at `to`, on the current runtime.
    pub async fn start(ca: &PrivateCa, to: SocketAddr) -> TlsFront {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(ca.server_config()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends it here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront { port, task }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}
