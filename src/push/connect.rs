//! The connect protocol's unary call to `push.v1.PusherService/Push`, over reqwest and rustls,
//! and what each answer means for the capture sent. A unary connect call is a plain HTTP POST
//! of the protobuf body (`Content-Type: application/proto`); success is a 200 with the
//! (empty) `PushResponse`, an error a non-200 status with a JSON `{"code", "message"}`.
//!
//! The classification is the heart of "refusals are final, failures are retried": see
//! [`classify`].
//!
//! # The connect client by hand, on reqwest
//!
//! A unary connect call is one HTTP POST of the protobuf body with `Content-Type:
//! application/proto`; the answer is a 200 with the response message or a status with a JSON
//! `{"code", "message"}`. That is thirty lines over reqwest, against a dependency on a young
//! connect crate and its code generator. reqwest and tokio are the libraries the project was
//! specified with, and the push is async because the collector runs on tokio and the live push
//! is one more task there.
//!
//! reqwest is built with `rustls-no-provider` and handed a rustls `ClientConfig` on the ring
//! provider (no aws-lc build) with the bundled Mozilla roots (`webpki-roots`, as the collector's
//! own reqwest client uses), or only the `--push-cacert` roots. No native-tls, no OpenSSL. HTTP/1.1 only: four requests in flight are four pooled connections, and h2 would
//! add a dependency's worth of code to save three handshakes.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::PushError;

pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// Where pushes go and how to authenticate: the plain configuration the CLI builds.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The server's base URL (`https://profiles-prod-001.grafana.net`), credentials included
    /// if the user wrote them; see [`Destination::shown`].
    pub url: String,
    /// `X-Scope-OrgID`, for a multi-tenant Pyroscope.
    pub tenant: Option<String>,
    /// Extra headers, e.g. `Authorization: Bearer TOKEN` or `Authorization: Basic …`.
    pub headers: Vec<(String, String)>,
    /// PEM roots that replace the bundled ones (a private CA).
    pub cacert: Option<std::path::PathBuf>,
    /// Per request, connecting included.
    pub timeout: Duration,
}

impl Destination {
    /// The server as `pushes.jsonl` names it: the shown URL and the tenant.
    pub fn server(&self) -> super::spool::Server {
        super::spool::Server {
            to: self.shown(),
            tenant: self.tenant.clone(),
        }
    }

    /// The base URL as recorded and printed: no user, no password, no query value, no
    /// trailing slash; a URL that cannot be parsed (no scheme, a bad port) loses them too.
    pub fn shown(&self) -> String {
        let parsed = reqwest::Url::parse(&self.url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host());
        let shown = match parsed {
            Some(mut url) => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                crate::source::target::redact(url.as_str())
            }
            None => crate::source::target::without_userinfo(&self.url),
        };
        shown.trim_end_matches('/').to_string()
    }
}

/// A server's answer that says the request itself will not be taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    /// The connect error code (`invalid_argument`), when the body had one.
    pub code: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// What one push attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Delivered {
        status: u16,
    },
    /// This capture is refused (a 4xx about the request: Pyroscope's 400 for a profile
    /// outside its ingestion window, a profile too large, too many labels). Final.
    Refused(Refusal),
    /// Every push will be refused until the configuration changes: bad or missing credentials
    /// (401, 403), a URL that serves no push API (404, 405, 415, unimplemented, a 200 that
    /// is not a connect answer), a certificate that does not verify. Stops the push; nothing
    /// is recorded against the captures, which were never judged.
    Rejected(Refusal),
    /// Try again later: 5xx, 408, 429, resets, timeouts, refused connections.
    Failed {
        why: String,
        /// From a `Retry-After` header, when the server named a wait.
        retry_after: Option<Duration>,
        /// The request may have reached the server and been stored: it went out and no
        /// answer came back (a timeout, a connection closed before the answer). Never for a
        /// refused connection or an HTTP answer.
        maybe_arrived: bool,
    },
}

/// Sends one encoded `PushRequest`. Behind a trait so the retry loop is tested without a
/// network and without sleeping.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, body: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send;
}

/// One client shared by several pushes (the targets of a cluster run).
impl<T: Transport> Transport for Arc<T> {
    fn send(&self, body: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send {
        (**self).send(body)
    }
}

/// The real transport: reqwest, HTTP/1.1, rustls on the ring provider.
pub struct ConnectClient {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    basic: Option<(String, Option<String>)>,
    timeout: Duration,
}

impl ConnectClient {
    /// A client for `destination`; its errors name the URL, for the caller to put its flag
    /// before.
    pub fn new(destination: &Destination) -> Result<ConnectClient, PushError> {
        let shown = destination.shown();
        if !destination.url.contains("://") {
            return Err(PushError::Config(format!(
                "{shown}: no scheme: write http://{shown} (or https://…), the server's base URL"
            )));
        }
        let mut url = reqwest::Url::parse(&destination.url)
            .map_err(|e| PushError::Config(format!("{shown}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(PushError::Config(format!(
                "{shown}: expected an http:// or https:// URL"
            )));
        }
        // Credentials in the URL become basic auth, and never reach a record or a message.
        let basic = (!url.username().is_empty()).then(|| {
            (
                percent_decode(url.username()),
                url.password().map(percent_decode),
            )
        });
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let base = url.as_str().trim_end_matches('/').to_string();
        let endpoint = reqwest::Url::parse(&format!("{base}{PUSH_PATH}"))
            .map_err(|e| PushError::Config(format!("{base}: {e}")))?;

        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/proto"),
        );
        headers.insert("connect-protocol-version", HeaderValue::from_static("1"));
        let timeout_ms = destination.timeout.as_millis().to_string();
        headers.insert(
            "connect-timeout-ms",
            HeaderValue::from_str(&timeout_ms).expect("digits are a header value"),
        );
        if let Some(tenant) = &destination.tenant {
            let value = HeaderValue::from_str(tenant).map_err(|_| {
                PushError::Config(format!("--push-tenant {tenant:?}: not a header value"))
            })?;
            headers.insert("x-scope-orgid", value);
        }
        for (name, value) in &destination.headers {
            let bad = || PushError::Config(format!("--push-header {name:?}: not a valid header"));
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }

        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config(destination.cacert.as_deref())?)
            .http1_only()
            .timeout(destination.timeout)
            .connect_timeout(destination.timeout)
            .user_agent(concat!("heapwatch/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PushError::Config(format!("the HTTP client: {e}")))?;
        Ok(ConnectClient {
            http,
            endpoint,
            headers,
            basic,
            timeout: destination.timeout,
        })
    }

    async fn call(&self, body: Vec<u8>) -> Answer {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .body(body);
        if let Some((user, password)) = &self.basic {
            request = request.basic_auth(user, password.as_ref());
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return self.failure(&e),
        };
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match response.bytes().await {
            Ok(body) => classify(status, &content_type, &body, retry_after),
            Err(e) => self.failure(&e),
        }
    }

    fn failure(&self, e: &reqwest::Error) -> Answer {
        if let Some(tls) = rustls_error(e) {
            return Answer::Rejected(Refusal {
                status: 0,
                code: None,
                message: format!("TLS: {tls} (a private CA goes in --push-cacert)"),
            });
        }
        let why = if e.is_timeout() {
            format!(
                "no answer within {}",
                crate::units::format_duration(self.timeout)
            )
        } else if e.is_connect() {
            format!("cannot connect: {}", innermost(e))
        } else {
            innermost(e)
        };
        Answer::Failed {
            why,
            retry_after: None,
            maybe_arrived: !e.is_connect(),
        }
    }
}

impl Transport for ConnectClient {
    fn send(&self, body: Vec<u8>) -> impl std::future::Future<Output = Answer> + Send {
        self.call(body)
    }
}

/// What an HTTP answer to a push means. Connect's own error code, when the body carries one,
/// is more precise than the status (a proxy's 503 has none).
pub fn classify(
    status: u16,
    content_type: &str,
    body: &[u8],
    retry_after: Option<Duration>,
) -> Answer {
    if status == 200 {
        // A connect server answers a unary proto call in kind; anything else answering 200
        // (a web UI at the wrong path, a captive portal) did not take the profile.
        if content_type.starts_with("application/proto") {
            return Answer::Delivered { status };
        }
        return Answer::Rejected(Refusal {
            status,
            code: None,
            message: format!(
                "answered with {:?}, not a connect reply: is this the base URL of a Pyroscope server?",
                if content_type.is_empty() {
                    "no content type"
                } else {
                    content_type
                }
            ),
        });
    }
    let (code, message) = connect_error(content_type, body);
    let refusal = Refusal {
        status,
        code: code.clone(),
        message,
    };
    let retry = |refusal: Refusal| Answer::Failed {
        why: refusal.to_string(),
        retry_after,
        maybe_arrived: false,
    };
    match code.as_deref() {
        Some(
            "unavailable" | "resource_exhausted" | "deadline_exceeded" | "aborted" | "internal"
            | "unknown" | "data_loss",
        ) => return retry(refusal),
        Some("unauthenticated" | "permission_denied" | "unimplemented") => {
            return Answer::Rejected(refusal);
        }
        Some("invalid_argument" | "out_of_range" | "failed_precondition" | "already_exists") => {
            return Answer::Refused(refusal);
        }
        _ => {}
    }
    match status {
        401 | 403 | 404 | 405 | 415 | 501 => Answer::Rejected(refusal),
        408 | 429 => retry(refusal),
        400..=499 => Answer::Refused(refusal),
        _ => retry(refusal),
    }
}

/// The code and message of a connect error body; a body that is not one gives its first line.
fn connect_error(content_type: &str, body: &[u8]) -> (Option<String>, String) {
    #[derive(serde::Deserialize)]
    struct ConnectError {
        code: Option<String>,
        #[serde(default)]
        message: String,
    }
    if content_type.starts_with("application/json") {
        if let Ok(e) = serde_json::from_slice::<ConnectError>(body) {
            return (e.code, e.message);
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    (None, text.lines().next().unwrap_or("").trim().to_string())
}

/// The push's TLS: the one client builder (`source::tls`), its errors worded for
/// `--push-cacert`.
fn tls_config(cacert: Option<&std::path::Path>) -> Result<rustls::ClientConfig, PushError> {
    use crate::source::tls::{ClientTls, TlsSetupError};
    let flag = |path: &std::path::Path, why: String| {
        PushError::Config(format!("--push-cacert {}: {why}", path.display()))
    };
    ClientTls {
        cacert,
        ..ClientTls::default()
    }
    .config()
    .map_err(|e| match e {
        TlsSetupError::Read { path, source, .. } => PushError::io(&path, source),
        TlsSetupError::BadPem { path, why, .. } => flag(&path, format!("bad PEM: {why}")),
        TlsSetupError::NoCertificate { path, .. } => {
            flag(&path, "no certificate in this PEM file".into())
        }
        TlsSetupError::NotCa { path, why } => flag(&path, format!("not a CA certificate: {why}")),
        other => PushError::Config(other.to_string()),
    })
}

/// The rustls error under a reqwest error, if the failure was a TLS one. It sits inside an
/// io::Error inside another: `source()` skips over an io::Error's payload, so look into it.
fn rustls_error(e: &reqwest::Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        next = match err.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => None,
            },
            None => err.source(),
        };
    }
    None
}

/// The deepest cause of an error: reqwest's own text ("error sending request") says little.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"code": code, "message": message})).unwrap()
    }

    #[test]
    fn pyroscopes_ingestion_window_refusal_is_final() {
        let body = json(
            "invalid_argument",
            "profile with labels '{}' is outside of ingestion window (profile timestamp: …)",
        );
        match classify(400, "application/json", &body, None) {
            Answer::Refused(r) => {
                assert_eq!(r.status, 400);
                assert_eq!(r.code.as_deref(), Some("invalid_argument"));
                assert!(r.message.contains("outside of ingestion window"));
            }
            other => panic!("{other:?}"),
        }
        // A 4xx with no connect body (a proxy's 413) is a refusal too.
        assert!(matches!(
            classify(413, "text/html", b"<html>Request Entity Too Large", None),
            Answer::Refused(_)
        ));
    }

    #[test]
    fn failures_are_retried_and_credentials_stop_the_push() {
        for (status, ct, body) in [
            (500, "text/plain", b"Internal Server Error".to_vec()),
            (503, "", Vec::new()),
            (
                429,
                "application/json",
                json("resource_exhausted", "rate limited"),
            ),
            (408, "text/plain", Vec::new()),
            (
                400,
                "application/json",
                json("unavailable", "ingester restarting"),
            ),
        ] {
            assert!(
                matches!(classify(status, ct, &body, None), Answer::Failed { .. }),
                "{status} {ct}"
            );
        }
        for (status, ct, body) in [
            (
                401,
                "application/json",
                json("unauthenticated", "invalid token"),
            ),
            (403, "text/plain", b"forbidden".to_vec()),
            (404, "text/plain", b"404 page not found".to_vec()),
            (200, "text/html", b"<html>".to_vec()),
        ] {
            assert!(
                matches!(classify(status, ct, &body, None), Answer::Rejected(_)),
                "{status} {ct}"
            );
        }
        assert_eq!(
            classify(200, "application/proto", b"", None),
            Answer::Delivered { status: 200 }
        );
        let wait = Some(Duration::from_secs(3));
        assert!(matches!(
            classify(503, "text/plain", b"", wait),
            Answer::Failed { retry_after, .. } if retry_after == wait
        ));
    }

    #[test]
    fn the_shown_url_has_no_credentials() {
        let d = Destination {
            url: "https://1234:glc_secret@profiles.example.net/".into(),
            tenant: None,
            headers: vec![],
            cacert: None,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(d.shown(), "https://profiles.example.net");
        assert_eq!(percent_decode("a%40b%3"), "a@b%3");
        // Unparsable, or no scheme: the credentials go all the same.
        for (url, shown) in [
            (
                "https://1234:glc_secret@profiles.example.net:99999/",
                "https://profiles.example.net:99999",
            ),
            (
                "1234:glc_secret@profiles.example.net",
                "profiles.example.net",
            ),
            (
                "https://1234:glc/secret@profiles.example.net",
                "https://profiles.example.net",
            ),
        ] {
            let d = Destination {
                url: url.into(),
                ..d.clone()
            };
            assert_eq!(d.shown(), shown, "{url}");
            let e = ConnectClient::new(&d).err().map(|e| e.to_string());
            assert!(!format!("{e:?}").contains("secret"), "{e:?}");
        }
    }
}
