//! Go's `net/http/pprof` over HTTP or HTTPS: heap at `/debug/pprof/heap`, goroutines at
//! `/debug/pprof/goroutine`, MemStats from `heap?debug=1`. A URL that already names a profile
//! path is used as given for the heap.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use super::{FailureKind, FetchError, Reply, Source, SourceKind, Want};

/// How to reach an HTTP target.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Extra request headers (`Authorization: Bearer …`).
    pub headers: Vec<(String, String)>,
    /// PEM file of the CA that signed the target's certificate.
    pub cacert: Option<PathBuf>,
    /// PEM client certificate and key, for mutual TLS.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// Accept any certificate.
    pub insecure: bool,
    /// Ask for a GC before the heap profile (`?gc=1`): fresher in-use figures, but it
    /// perturbs the target.
    pub force_gc: bool,
    /// Largest body accepted.
    pub max_body: u64,
}

pub struct HttpSource {
    target: String,
    heap_url: String,
    goroutine_url: String,
    memstats_url: String,
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
    max_body: u64,
}

impl HttpSource {
    pub fn new(target: &str, options: &HttpOptions) -> Result<HttpSource, FetchError> {
        let url = target.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(FetchError::new(
                FailureKind::Other,
                format!("{target}: not an http(s) URL"),
            ));
        }
        let after_scheme = url.split_once("://").map_or("", |(_, rest)| rest);
        let (heap_url, base) = match after_scheme.find('/') {
            // A URL with a path names the profile; the other endpoints sit beside it.
            Some(slash) => {
                let base_end = url.len() - after_scheme.len() + slash;
                let base = match url.find("/debug/pprof/") {
                    Some(i) => url[..i].to_string(),
                    None => url[..base_end].to_string(),
                };
                (url.to_string(), base)
            }
            None => (format!("{url}/debug/pprof/heap"), url.to_string()),
        };
        let heap_url = if options.force_gc {
            let sep = if heap_url.contains('?') { '&' } else { '?' };
            format!("{heap_url}{sep}gc=1")
        } else {
            heap_url
        };
        let tls = tls_config(options)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .user_agent(concat!("heapwatch/", env!("CARGO_PKG_VERSION")))
            .max_idle_connections_per_host(1)
            .build();
        Ok(HttpSource {
            target: target.to_string(),
            goroutine_url: format!("{base}/debug/pprof/goroutine"),
            memstats_url: format!("{base}/debug/pprof/heap?debug=1"),
            heap_url,
            agent: config.into(),
            headers: options.headers.clone(),
            max_body: if options.max_body == 0 {
                512 << 20
            } else {
                options.max_body
            },
        })
    }

    fn get(&self, url: &str, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let (status, bytes) = get(&self.agent, &self.headers, url, timeout, self.max_body)?;
        if status != 200 {
            return Err(status_error(url, status, &bytes));
        }
        Ok(bytes)
    }
}

/// One GET with a deadline and the extra headers: the status and the body, capped at `cap`
/// for a 200 and at 2 KiB for anything else (a long error page is still an answer).
pub(crate) fn get(
    agent: &ureq::Agent,
    headers: &[(String, String)],
    url: &str,
    timeout: Duration,
    cap: u64,
) -> Result<(u16, Vec<u8>), FetchError> {
    let mut request = agent
        .get(url)
        .config()
        .timeout_global(Some(timeout))
        .build();
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let mut response = request.call().map_err(|e| classify(url, e))?;
    let status = response.status().as_u16();
    let limit = if status == 200 { cap } else { 2048 };
    match response.body_mut().with_config().limit(limit).read_to_vec() {
        Ok(bytes) => Ok((status, bytes)),
        Err(_) if status != 200 => Ok((status, Vec::new())),
        Err(e) => Err(classify(url, e)),
    }
}

/// A non-200 answer as an error naming the URL, the status and the start of the body.
pub(crate) fn status_error(url: &str, status: u16, body: &[u8]) -> FetchError {
    let text = String::from_utf8_lossy(body);
    let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text: String = text.chars().take(160).collect();
    FetchError::new(FailureKind::Status, format!("{url}: HTTP {status}: {text}"))
}

impl Source for HttpSource {
    fn target(&self) -> &str {
        &self.target
    }

    fn kind(&self) -> SourceKind {
        SourceKind::Http
    }

    fn supports(&self, want: Want) -> bool {
        want != Want::Stats
    }

    fn fetch(&mut self, want: Want, timeout: Duration) -> Result<Reply, FetchError> {
        let url = match want {
            Want::Heap => &self.heap_url,
            Want::Goroutine => &self.goroutine_url,
            Want::MemStats => &self.memstats_url,
            Want::Stats => {
                return Err(FetchError::new(
                    FailureKind::Other,
                    "net/http/pprof has no runtime stats endpoint",
                ));
            }
        };
        let bytes = self.get(&url.clone(), timeout)?;
        Ok(Reply { bytes, pid: None })
    }
}

/// Classes a ureq error into the failure kinds the collector acts on (Envoy's source too).
pub(crate) fn classify(url: &str, error: ureq::Error) -> FetchError {
    use ureq::Error as E;
    let kind = match &error {
        // rustls reports a failed handshake (unknown issuer, an alert from the server) as an
        // io::Error wrapping its own error: that is TLS, not a broken or refused connection.
        E::Io(e) if wraps_rustls(e) => FailureKind::Tls,
        E::Io(e) => io_kind(e),
        E::Timeout(_) => FailureKind::Timeout,
        E::HostNotFound | E::ConnectionFailed => FailureKind::Refused,
        E::BodyExceedsLimit(_) => FailureKind::TooLarge,
        E::Tls(_) | E::Rustls(_) | E::Pem(_) => FailureKind::Tls,
        E::Protocol(_) => FailureKind::Reset,
        _ => FailureKind::Other,
    };
    let detail = match (&error, kind) {
        (E::BodyExceedsLimit(n), _) => format!("response body larger than {n} bytes"),
        (_, FailureKind::Refused) => format!("connection refused or unreachable ({error})"),
        (_, FailureKind::Timeout) => format!("no complete answer in time ({error})"),
        (_, FailureKind::Reset) => format!("connection broke mid-request ({error})"),
        _ => error.to_string(),
    };
    FetchError::new(kind, format!("{url}: {detail}"))
}

/// Whether an io::Error carries a rustls error somewhere in its chain. The type is the one in
/// `ureq::Error::Rustls`, named through that variant: rustls is not a direct dependency.
fn wraps_rustls(e: &io::Error) -> bool {
    fn is_payload_of<T: std::error::Error + 'static>(
        _variant: fn(T) -> ureq::Error,
        e: &(dyn std::error::Error + 'static),
    ) -> bool {
        e.is::<T>()
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = match e.get_ref() {
        Some(inner) => Some(inner),
        None => return false,
    };
    while let Some(inner) = next {
        if is_payload_of(ureq::Error::Rustls, inner) {
            return true;
        }
        next = inner.source();
    }
    false
}

fn io_kind(e: &io::Error) -> FailureKind {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused
        | K::AddrNotAvailable
        | K::NotFound
        | K::HostUnreachable
        | K::NetworkUnreachable => FailureKind::Refused,
        K::TimedOut | K::WouldBlock => FailureKind::Timeout,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            FailureKind::Reset
        }
        _ => FailureKind::Other,
    }
}

fn read_pem(path: &PathBuf, what: &str) -> Result<Vec<PemItem<'static>>, FetchError> {
    let bytes = std::fs::read(path).map_err(|e| {
        FetchError::new(
            FailureKind::Tls,
            format!("{}: cannot read {what}: {e}", path.display()),
        )
    })?;
    ureq::tls::parse_pem(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            FetchError::new(
                FailureKind::Tls,
                format!("{}: bad PEM {what}: {e}", path.display()),
            )
        })
}

fn certificates(path: &PathBuf, what: &str) -> Result<Vec<Certificate<'static>>, FetchError> {
    let certs: Vec<Certificate<'static>> = read_pem(path, what)?
        .into_iter()
        .filter_map(|item| match item {
            PemItem::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(FetchError::new(
            FailureKind::Tls,
            format!(
                "{}: no certificate in this PEM file ({what})",
                path.display()
            ),
        ));
    }
    Ok(certs)
}

fn tls_config(options: &HttpOptions) -> Result<TlsConfig, FetchError> {
    let mut builder = TlsConfig::builder().disable_verification(options.insecure);
    if let Some(ca) = &options.cacert {
        let certs = certificates(ca, "CA certificate")?;
        builder = builder.root_certs(RootCerts::new_with_certs(&certs));
    }
    match (&options.client_cert, &options.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "client certificate")?;
            let key: PrivateKey<'static> = read_pem(key, "client key")?
                .into_iter()
                .find_map(|item| match item {
                    PemItem::PrivateKey(k) => Some(k),
                    _ => None,
                })
                .ok_or_else(|| {
                    FetchError::new(
                        FailureKind::Tls,
                        format!("{}: no private key in this PEM file", key.display()),
                    )
                })?;
            builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        (None, None) => {}
        _ => {
            return Err(FetchError::new(
                FailureKind::Tls,
                "a client certificate needs both --cert and --key",
            ));
        }
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_follow_from_the_base_url() {
        let s = HttpSource::new("http://127.0.0.1:6060/", &HttpOptions::default()).unwrap();
        assert_eq!(s.heap_url, "http://127.0.0.1:6060/debug/pprof/heap");
        assert_eq!(
            s.goroutine_url,
            "http://127.0.0.1:6060/debug/pprof/goroutine"
        );
        assert_eq!(
            s.memstats_url,
            "http://127.0.0.1:6060/debug/pprof/heap?debug=1"
        );
    }

    #[test]
    fn a_url_naming_a_profile_is_used_as_given() {
        let s =
            HttpSource::new("http://h:1/admin/debug/pprof/heap", &HttpOptions::default()).unwrap();
        assert_eq!(s.heap_url, "http://h:1/admin/debug/pprof/heap");
        assert_eq!(s.goroutine_url, "http://h:1/admin/debug/pprof/goroutine");
        let gc = HttpOptions {
            force_gc: true,
            ..HttpOptions::default()
        };
        let s = HttpSource::new("http://h:1", &gc).unwrap();
        assert_eq!(s.heap_url, "http://h:1/debug/pprof/heap?gc=1");
    }
}
