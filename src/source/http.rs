//! Go's `net/http/pprof` over HTTP or HTTPS: heap at `/debug/pprof/heap`, goroutines at
//! `/debug/pprof/goroutine`, MemStats from `heap?debug=1`. A URL that already names a profile
//! path is used as given for the heap.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{BodyTap, FailureKind, FetchError, Fetching, Reply, Source, SourceKind, Want};

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
    client: HttpClient,
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
        let tls = super::tls::client_config(options)?;
        Ok(HttpSource {
            target: target.to_string(),
            goroutine_url: format!("{base}/debug/pprof/goroutine"),
            memstats_url: format!("{base}/debug/pprof/heap?debug=1"),
            heap_url,
            client: HttpClient::new(&options.headers, tls)?,
            max_body: if options.max_body == 0 {
                512 << 20
            } else {
                options.max_body
            },
        })
    }

    async fn get(
        &self,
        want: Want,
        timeout: Duration,
        tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<Reply, FetchError> {
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
        let (status, bytes) = self.client.get(url, timeout, self.max_body, tap).await?;
        if status != 200 {
            return Err(status_error(url, status, &bytes));
        }
        Ok(Reply { bytes, pid: None })
    }
}

/// reqwest over rustls, HTTP/1.1, the extra headers on every request; the connection is kept
/// between requests, as one target is asked over and over. HTTP and Envoy targets share it.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    headers: HeaderMap,
}

impl HttpClient {
    pub(crate) fn new(
        headers: &[(String, String)],
        tls: rustls::ClientConfig,
    ) -> Result<HttpClient, FetchError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let bad = || {
                FetchError::new(
                    FailureKind::Other,
                    format!("header {name:?}: not a valid HTTP header"),
                )
            };
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            map.append(name, value);
        }
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .http1_only()
            .pool_max_idle_per_host(1)
            .user_agent(concat!("heapwatch/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::new(FailureKind::Other, format!("the HTTP client: {e}")))?;
        Ok(HttpClient {
            client,
            headers: map,
        })
    }

    /// One GET within `timeout` overall: the status and the body, read as it streams in and
    /// capped at `cap` for a 200 (past it the request is dropped, a too-large failure) and at
    /// 2 KiB for anything else (a long error page is still an answer). `tap` is told each
    /// piece of a 200 body within the cap as it arrives.
    pub(crate) async fn get(
        &self,
        url: &str,
        timeout: Duration,
        cap: u64,
        mut tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<(u16, Vec<u8>), FetchError> {
        let too_large = || {
            FetchError::new(
                FailureKind::TooLarge,
                format!("{url}: response body larger than {cap} bytes"),
            )
        };
        let mut response = self
            .client
            .get(url)
            .headers(self.headers.clone())
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| classify(url, &e))?;
        let status = response.status().as_u16();
        if status == 200 && response.content_length().is_some_and(|n| n > cap) {
            return Err(too_large());
        }
        let limit = if status == 200 { cap } else { 2048 } as usize;
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > limit {
                        if status != 200 {
                            body.extend_from_slice(&chunk[..limit - body.len()]);
                            return Ok((status, body));
                        }
                        return Err(too_large());
                    }
                    if status == 200 {
                        if let Some(tap) = tap.as_deref_mut() {
                            tap.piece(&chunk);
                        }
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok((status, body)),
                Err(_) if status != 200 => return Ok((status, body)),
                Err(e) => return Err(classify(url, &e)),
            }
        }
    }
}

/// Runs a request to its end on a runtime of its own, for a caller that is not async (the
/// `envoy` command, tests). Never call it from inside a runtime.
pub(crate) fn blocking<T>(
    work: impl Future<Output = Result<T, FetchError>>,
) -> Result<T, FetchError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            FetchError::new(
                FailureKind::Other,
                format!("cannot start a runtime for the request: {e}"),
            )
        })?
        .block_on(work)
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
        blocking(self.get(want, timeout, None))
    }

    fn fetch_async<'a>(
        &'a mut self,
        want: Want,
        timeout: Duration,
        tap: Option<&'a mut dyn BodyTap>,
    ) -> Option<Fetching<'a>> {
        Some(Box::pin(self.get(want, timeout, tap)))
    }
}

/// Classes a reqwest error into the failure kinds the collector acts on (Envoy's source too).
pub(crate) fn classify(url: &str, error: &reqwest::Error) -> FetchError {
    let detail = innermost(error);
    if let Some(tls) = rustls_error(error) {
        return FetchError::new(FailureKind::Tls, format!("{url}: TLS: {tls}"));
    }
    let kind = if error.is_timeout() {
        FailureKind::Timeout
    } else if let Some(kind) = io_error_kind(error) {
        kind
    } else if error.is_connect() {
        // A name that does not resolve: nothing there to ask.
        FailureKind::Refused
    } else if error.is_builder() {
        FailureKind::Other
    } else if error.is_request() || error.is_body() {
        // The connection closed before a whole answer came (hyper's incomplete message).
        FailureKind::Reset
    } else {
        FailureKind::Other
    };
    let detail = match kind {
        FailureKind::Refused => format!("connection refused or unreachable ({detail})"),
        FailureKind::Timeout => format!("no complete answer in time ({detail})"),
        FailureKind::Reset => format!("connection broke mid-request ({detail})"),
        _ => detail,
    };
    FetchError::new(kind, format!("{url}: {detail}"))
}

/// Each error of a chain, the payload of an io::Error included (`source()` skips over it).
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |err| match err.downcast_ref::<io::Error>() {
        Some(io) => io
            .get_ref()
            .map(|inner| inner as &(dyn std::error::Error + 'static)),
        None => err.source(),
    })
}

/// The rustls error under a reqwest error, if the failure was a TLS one (a failed handshake,
/// an alert from the server).
fn rustls_error(e: &reqwest::Error) -> Option<String> {
    chain(e).find_map(|err| err.downcast_ref::<rustls::Error>().map(|t| t.to_string()))
}

/// The class of the first io::Error in the chain that says something.
fn io_error_kind(e: &reqwest::Error) -> Option<FailureKind> {
    chain(e)
        .filter_map(|err| err.downcast_ref::<io::Error>())
        .map(io_kind)
        .find(|&k| k != FailureKind::Other)
}

/// The deepest cause of an error: reqwest's own text ("error sending request") says little.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
        .last()
        .map_or_else(String::new, |err| err.to_string())
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
