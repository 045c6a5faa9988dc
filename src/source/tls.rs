//! The rustls client configuration of HTTPS targets (`--cacert`, `--cert`/`--key`,
//! `--insecure`), on the ring provider as the push uses, handed to reqwest preconfigured.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::http::HttpOptions;
use super::{FailureKind, FetchError};

/// What a TLS client is asked to trust and show: the one builder of rustls client
/// configurations, for HTTPS targets and for the push alike.
#[derive(Default)]
pub(crate) struct ClientTls<'a> {
    /// CA certificates (PEM) to trust instead of the bundled web roots.
    pub cacert: Option<&'a Path>,
    /// Take any certificate for the server's (the handshake signatures are still checked).
    pub insecure: bool,
    /// A client certificate chain and its key (PEM), for mutual TLS.
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
}

/// Why a client configuration could not be built; each caller words it for its own flags.
#[derive(Debug)]
pub(crate) enum TlsSetupError {
    Read {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    BadPem {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    NoCertificate {
        path: PathBuf,
        what: &'static str,
    },
    NotCa {
        path: PathBuf,
        why: String,
    },
    NoKey(PathBuf),
    ClientAuth {
        key: PathBuf,
        why: String,
    },
    HalfClientAuth,
    Protocol(String),
}

impl std::fmt::Display for TlsSetupError {
    /// The words for an HTTPS target (`--cacert`, `--cert`, `--key`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsSetupError::Read { path, what, source } => {
                write!(f, "{}: cannot read {what}: {source}", path.display())
            }
            TlsSetupError::BadPem { path, what, why } => {
                write!(f, "{}: bad PEM {what}: {why}", path.display())
            }
            TlsSetupError::NoCertificate { path, what } => write!(
                f,
                "{}: no certificate in this PEM file ({what})",
                path.display()
            ),
            TlsSetupError::NotCa { path, why } => {
                write!(f, "{}: not a CA certificate: {why}", path.display())
            }
            TlsSetupError::NoKey(path) => {
                write!(f, "{}: no private key in this PEM file", path.display())
            }
            TlsSetupError::ClientAuth { key, why } => write!(f, "{}: {why}", key.display()),
            TlsSetupError::HalfClientAuth => {
                write!(f, "a client certificate needs both --cert and --key")
            }
            TlsSetupError::Protocol(why) => write!(f, "TLS: {why}"),
        }
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(path).map_err(|source| TlsSetupError::Read {
        path: path.to_path_buf(),
        what,
        source,
    })
}

fn certificates(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadPem {
            path: path.to_path_buf(),
            what,
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(certs)
}

/// The client configuration of an HTTPS target's options, its errors worded for them.
pub(crate) fn client_config(options: &HttpOptions) -> Result<rustls::ClientConfig, FetchError> {
    ClientTls {
        cacert: options.cacert.as_deref(),
        insecure: options.insecure,
        cert: options.client_cert.as_deref(),
        key: options.client_key.as_deref(),
    }
    .config()
    .map_err(|e| FetchError::new(FailureKind::Tls, e.to_string()))
}

impl ClientTls<'_> {
    /// The configuration asked for: the bundled web roots unless `cacert` names others, a
    /// client certificate for mutual TLS, or no verification at all; HTTP/1.1 by ALPN.
    pub(crate) fn config(&self) -> Result<rustls::ClientConfig, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Protocol(e.to_string()))?;
        let builder = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                    provider.signature_verification_algorithms,
                )))
        } else {
            let mut roots = rustls::RootCertStore::empty();
            match self.cacert {
                Some(ca) => {
                    for cert in certificates(ca, "CA certificate")? {
                        roots.add(cert).map_err(|e| TlsSetupError::NotCa {
                            path: ca.to_path_buf(),
                            why: e.to_string(),
                        })?;
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            builder.with_root_certificates(roots)
        };
        let mut config = match (self.cert, self.key) {
            (Some(cert), Some(key)) => {
                let chain = certificates(cert, "client certificate")?;
                let key_pem = read(key, "client key")?;
                let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|_| TlsSetupError::NoKey(key.to_path_buf()))?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    TlsSetupError::ClientAuth {
                        key: key.to_path_buf(),
                        why: e.to_string(),
                    }
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(TlsSetupError::HalfClientAuth),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// `--insecure`: any certificate is taken for the server's, though the handshake signatures
/// are still checked against it.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
