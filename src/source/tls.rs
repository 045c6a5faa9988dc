//! The rustls client configuration of HTTPS targets (`--cacert`, `--cert`/`--key`,
//! `--insecure`), on the ring provider as the push uses, handed to reqwest preconfigured.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::http::HttpOptions;
use super::{FailureKind, FetchError};

fn tls_error(message: String) -> FetchError {
    FetchError::new(FailureKind::Tls, message)
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, FetchError> {
    std::fs::read(path)
        .map_err(|e| tls_error(format!("{}: cannot read {what}: {e}", path.display())))
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, FetchError> {
    let bytes = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(format!("{}: bad PEM {what}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_error(format!(
            "{}: no certificate in this PEM file ({what})",
            path.display()
        )));
    }
    Ok(certs)
}

/// The client configuration the options ask for: the bundled web roots unless `--cacert`
/// names others, a client certificate for mutual TLS, or no verification at all.
pub(crate) fn client_config(options: &HttpOptions) -> Result<rustls::ClientConfig, FetchError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("TLS: {e}")))?;
    let builder = if options.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                provider.signature_verification_algorithms,
            )))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &options.cacert {
            Some(ca) => {
                for cert in certificates(ca, "CA certificate")? {
                    roots.add(cert).map_err(|e| {
                        tls_error(format!("{}: not a CA certificate: {e}", ca.display()))
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match (&options.client_cert, &options.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "client certificate")?;
            let key_pem = read(key, "client key")?;
            let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
                tls_error(format!(
                    "{}: no private key in this PEM file",
                    key.display()
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| tls_error(format!("{}: {e}", key.display())))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(tls_error(
                "a client certificate needs both --cert and --key".into(),
            ));
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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
