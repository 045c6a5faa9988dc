//! Go's `net/http/pprof` over HTTP or HTTPS: heap at `/debug/pprof/heap`, goroutines at
//! `/debug/pprof/goroutine`, MemStats from `heap?debug=1`. A URL that already names a profile
//! path is used as given for the heap.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use base64::Engine as _;

use super::target::{Endpoint, Secret, Target, TargetUrl, scrub, scrub_order};
use super::{BodyTap, FailureKind, FetchError, Fetching, Reply, Source, SourceKind, Want};

/// How to reach an HTTP target.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Extra request headers (`Authorization: Bearer …`): sent, never shown.
    pub headers: Vec<(String, Secret)>,
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
    target: Target,
    heap: Endpoint,
    goroutine: Endpoint,
    memstats: Endpoint,
    client: HttpClient,
    max_body: u64,
}

impl HttpSource {
    /// `target` as the user gave it; credentials in it become Basic auth and are never shown
    /// (see [`Target`]).
    pub fn new(target: impl Into<Target>, options: &HttpOptions) -> Result<HttpSource, FetchError> {
        let target: Target = target.into();
        let url = target.url().ok_or_else(|| {
            FetchError::new(FailureKind::Other, format!("{target}: not an http(s) URL"))
        })?;
        // A URL with a path names the profile; the other endpoints sit beside it.
        let (heap_path, base) = if url.path.is_empty() {
            ("/debug/pprof/heap".to_string(), "")
        } else {
            let base = url
                .path
                .find("/debug/pprof/")
                .map_or("", |i| &url.path[..i]);
            (url.path.clone(), base)
        };
        let gc: &[&str] = if options.force_gc { &["gc=1"] } else { &[] };
        let heap = url.endpoint(&heap_path, gc, true);
        let goroutine = url.endpoint(&format!("{base}/debug/pprof/goroutine"), &[], false);
        let memstats = url.endpoint(&format!("{base}/debug/pprof/heap"), &["debug=1"], false);
        let tls = super::tls::client_config(options)?;
        Ok(HttpSource {
            client: HttpClient::new(&url, &options.headers, tls)?,
            target,
            heap,
            goroutine,
            memstats,
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
        let endpoint = match want {
            Want::Heap => &self.heap,
            Want::Goroutine => &self.goroutine,
            Want::MemStats => &self.memstats,
            Want::Stats => {
                return Err(FetchError::new(
                    FailureKind::Other,
                    "net/http/pprof has no runtime stats endpoint",
                ));
            }
        };
        let (status, bytes) = self
            .client
            .get(endpoint, timeout, self.max_body, tap)
            .await?;
        if status != 200 {
            return Err(self.client.status_error(endpoint, status, &bytes));
        }
        Ok(Reply {
            bytes,
            pid: None,
            made: None,
        })
    }
}

/// reqwest over rustls, HTTP/1.1, the extra headers on every request; the connection is kept
/// between requests, as one target is asked over and over. HTTP and Envoy targets share it.
/// It knows every secret of its target (headers, a URL's credentials and tokens) and clears
/// each from any text it passes on, an error page that echoes the request included.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    headers: HeaderMap,
    secrets: Vec<String>,
}

impl HttpClient {
    /// `url`'s user info becomes `Authorization: Basic`, unless a header of `headers` is an
    /// `Authorization` (it wins, as it did when reqwest read the user info itself).
    pub(crate) fn new(
        url: &TargetUrl,
        headers: &[(String, Secret)],
        tls: rustls::ClientConfig,
    ) -> Result<HttpClient, FetchError> {
        let mut map = HeaderMap::new();
        let mut secrets = url.secrets.clone();
        for (name, value) in headers {
            let bad = || {
                FetchError::new(
                    FailureKind::Other,
                    format!("header {name:?}: not a valid HTTP header"),
                )
            };
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let sent = value.expose();
            let mut value = HeaderValue::from_str(sent).map_err(|_| bad())?;
            value.set_sensitive(true);
            map.append(name, value);
            secrets.extend(header_secrets(sent));
        }
        if let Some(basic) = url
            .basic
            .as_ref()
            .filter(|_| !map.contains_key(AUTHORIZATION))
        {
            let mut value = HeaderValue::from_str(basic.expose()).map_err(|_| {
                FetchError::new(
                    FailureKind::Other,
                    "the URL's user info is not a valid header",
                )
            })?;
            value.set_sensitive(true);
            map.insert(AUTHORIZATION, value);
            secrets.extend(header_secrets(basic.expose()));
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
            secrets: scrub_order(secrets),
        })
    }

    /// One GET within `timeout` overall: the status and the body, read as it streams in and
    /// capped at `cap` for a 200 (past it the request is dropped, a too-large failure) and at
    /// 2 KiB for anything else (a long error page is still an answer). `tap` is told each
    /// piece of a 200 body within the cap as it arrives.
    pub(crate) async fn get(
        &self,
        endpoint: &Endpoint,
        timeout: Duration,
        cap: u64,
        tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<(u16, Vec<u8>), FetchError> {
        self.get_unscrubbed(endpoint, timeout, cap, tap)
            .await
            .map_err(|e| FetchError::new(e.kind, scrub(&e.message, &self.secrets)))
    }

    async fn get_unscrubbed(
        &self,
        endpoint: &Endpoint,
        timeout: Duration,
        cap: u64,
        mut tap: Option<&mut (dyn BodyTap + '_)>,
    ) -> Result<(u16, Vec<u8>), FetchError> {
        let too_large = || {
            FetchError::new(
                FailureKind::TooLarge,
                format!("{endpoint}: response body larger than {cap} bytes"),
            )
        };
        let mut response = self
            .client
            .get(endpoint.url.expose())
            .headers(self.headers.clone())
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| classify(endpoint, e))?;
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
                Err(e) => return Err(classify(endpoint, e)),
            }
        }
    }

    /// The start of an answer's body as one line for a message, cleared of secrets (a server
    /// may echo the request it refused).
    pub(crate) fn answer_text(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        scrub(&text, &self.secrets).chars().take(160).collect()
    }

    /// A non-200 answer as an error naming the URL, the status and the start of the body;
    /// a refusal of the credentials says where they come from.
    pub(crate) fn status_error(&self, endpoint: &Endpoint, status: u16, body: &[u8]) -> FetchError {
        let hint = match status {
            401 | 403 => {
                " (the target refused the credentials: check the URL's user and password, \
                 --header, or its token)"
            }
            _ => "",
        };
        FetchError::new(
            FailureKind::Status,
            format!(
                "{endpoint}: HTTP {status}: {}{hint}",
                self.answer_text(body)
            ),
        )
    }
}

/// What of a header value must never appear in a message: the value, the credential of an
/// `Authorization: SCHEME CREDENTIAL`, and for `Basic` the `user:password` it encodes and
/// the password alone (a server may echo them decoded).
fn header_secrets(value: &str) -> Vec<String> {
    let value = value.trim();
    let mut secrets = vec![value.to_string()];
    if let Some((scheme, credential)) = value.split_once(char::is_whitespace) {
        let credential = credential.trim();
        secrets.push(credential.to_string());
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(credential)
                .ok()
                .and_then(|d| String::from_utf8(d).ok());
            if let Some(decoded) = decoded {
                if let Some((_, password)) = decoded.split_once(':') {
                    secrets.push(password.to_string());
                }
                secrets.push(decoded);
            }
        }
    }
    secrets
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

impl Source for HttpSource {
    fn target(&self) -> &str {
        self.target.as_str()
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

/// Classes a reqwest error into the failure kinds the collector acts on, in words naming
/// the endpoint as shown (reqwest's own text would name the URL as sent).
fn classify(endpoint: &Endpoint, error: reqwest::Error) -> FetchError {
    let error = &error.without_url();
    let url = &endpoint.shown;
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
        .map(FailureKind::of_io)
        .find(|&k| k != FailureKind::Other)
}

/// The deepest cause of an error: reqwest's own text ("error sending request") says little.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
        .last()
        .map_or_else(String::new, |err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basic_header_is_kept_out_whole_encoded_and_decoded() {
        // base64("alice:pw/x")
        let secrets = header_secrets(" Basic YWxpY2U6cHcveA== ");
        for secret in [
            "Basic YWxpY2U6cHcveA==",
            "YWxpY2U6cHcveA==",
            "alice:pw/x",
            "pw/x",
        ] {
            assert!(secrets.iter().any(|s| s == secret), "{secret}: {secrets:?}");
        }
        assert!(!secrets.iter().any(|s| s == "alice"));
        let order = scrub_order(secrets);
        assert_eq!(
            scrub(
                "refused: user alice password pw/x (pw%2Fx) unauthorized",
                &order
            ),
            "refused: user alice password *** (***) unauthorized"
        );
        assert_eq!(header_secrets("Bearer t0k"), ["Bearer t0k", "t0k"]);
    }

    fn urls(s: &HttpSource) -> [&str; 3] {
        [&s.heap, &s.goroutine, &s.memstats].map(|e| e.url.expose())
    }

    #[test]
    fn endpoints_follow_from_the_base_url() {
        let s = HttpSource::new("http://127.0.0.1:6060/", &HttpOptions::default()).unwrap();
        assert_eq!(
            urls(&s),
            [
                "http://127.0.0.1:6060/debug/pprof/heap",
                "http://127.0.0.1:6060/debug/pprof/goroutine",
                "http://127.0.0.1:6060/debug/pprof/heap?debug=1",
            ]
        );
    }

    #[test]
    fn a_url_naming_a_profile_is_used_as_given() {
        let s =
            HttpSource::new("http://h:1/admin/debug/pprof/heap", &HttpOptions::default()).unwrap();
        assert_eq!(urls(&s)[0], "http://h:1/admin/debug/pprof/heap");
        assert_eq!(urls(&s)[1], "http://h:1/admin/debug/pprof/goroutine");
        let gc = HttpOptions {
            force_gc: true,
            ..HttpOptions::default()
        };
        let s = HttpSource::new("http://h:1", &gc).unwrap();
        assert_eq!(urls(&s)[0], "http://h:1/debug/pprof/heap?gc=1");
    }

    /// A token in the query reaches every endpoint and shows in none; credentials leave the
    /// URL for a header.
    #[test]
    fn a_token_reaches_every_endpoint_and_credentials_none() {
        let s = HttpSource::new(
            "http://bob:pw1234@h:1/debug/pprof/heap?debug=0&token=t0ken",
            &HttpOptions::default(),
        )
        .unwrap();
        assert_eq!(
            urls(&s),
            [
                "http://h:1/debug/pprof/heap?debug=0&token=t0ken",
                "http://h:1/debug/pprof/goroutine?token=t0ken",
                "http://h:1/debug/pprof/heap?debug=1&token=t0ken",
            ]
        );
        assert_eq!(
            s.memstats.shown,
            "http://h:1/debug/pprof/heap?debug=1&token=***"
        );
        assert_eq!(
            s.target(),
            "http://bob:***@h:1/debug/pprof/heap?debug=0&token=***"
        );
        assert!(s.client.headers.contains_key(AUTHORIZATION));
        let text = s.client.answer_text(b"denied: bob/pw1234 with t0ken");
        assert_eq!(text, "denied: bob/*** with ***");
    }

    #[test]
    fn a_header_of_its_own_wins_over_the_urls_user_info() {
        let options = HttpOptions {
            headers: vec![("Authorization".into(), Secret::new("Bearer abcdef"))],
            ..HttpOptions::default()
        };
        let s = HttpSource::new("http://bob:pw1234@h:1", &options).unwrap();
        let sent: Vec<_> = s.client.headers.get_all(AUTHORIZATION).iter().collect();
        assert_eq!(sent, ["Bearer abcdef"]);
        assert_eq!(
            s.client.answer_text(b"got Bearer abcdef; abcdef is bad"),
            "got ***; *** is bad"
        );
    }
}
