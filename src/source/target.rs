//! A target as the user named it, with its secrets held apart. A URL's password (or a lone
//! user name, often a token), and the values of query parameters that are not pprof's own
//! (`?token=…`), are used to reach the target and never shown: a [`Target`] displays,
//! debugs and hands out only its redacted form, and only the HTTP client gets the rest.
//!
//! # Secrets: a target's credentials are used, never kept (`src/source/target.rs`)
//!
//! SPEC "Secrets". Held by construction rather than by scrubbing each place that prints:
//!
//! - A target is a `source::Target` from the moment clap reads it (`collect TARGET…`,
//!   `run --also`). Its only `Display`, `Debug` and `as_str` are the shown form (`redact`): a
//!   password as `***` (`http://alice:***@host`), a lone user name as `***` (often a token), the
//!   value of every query parameter but pprof's own (`debug`, `gc`, `seconds`) and Envoy's
//!   `filter` as `***` (an allowlist: a `?token=`, `?key=`, `?sig=` is hidden without being
//!   named). Node names, `run.json`, messages and events only ever see that form. The pushed
//!   `heapwatch_target` label shows less still: that form without its user info, query and
//!   fragment (`push/labels.rs` `redacted_target`: `http://alice:pw@host:6060/x?token=t` →
//!   `http://host:6060/x`).
//! - Only `HttpSource` and `EnvoySource` ask the `Target` for its URL (`pub(crate) url()`): the
//!   origin without user info, the path, the parameters. The user info becomes an
//!   `Authorization: Basic` header built here (base64 and percent-decoding from the `base64` and
//!   `percent-encoding` crates, both already in the tree under reqwest), unless `--header` gives
//!   an `Authorization` (it wins, as it did when reqwest read the URL). No request URL holds a
//!   password, so reqwest's error text cannot show one; a query token must stay in the URL, so
//!   errors are taken `without_url()` and every message names the endpoint's shown form
//!   (`Endpoint { url: Secret, shown }`). A token in the query is carried to the goroutine and
//!   MemStats endpoints too (it was dropped, which made them 401).
//! - `--header` values are `Secret`s (`Debug` prints `***`, no `Display`, no `Serialize`) from
//!   `cli/headers.rs`, which `--push-header` shares: `@FILE` reads `Name: value` lines, a file
//!   that cannot be read or holds no header is a usage error naming it, and a malformed header
//!   is named by flag, file and line, never by its value.
//! - `HttpClient` alone holds every secret of its target (header values and the credential
//!   after `Bearer`, the password, its Basic form, the query values) and clears each from the
//!   text it passes on: an error page that echoes the request, a library's error.
//! - `run.json`'s `target` fields (`RunInfo`, `ClusterTarget`) are written and read through
//!   `source::target::shown`, so a run recorded by a version that kept a password gives it up
//!   to report, growth and push (whose labels and capture ids derive from `RunInfo.target`).

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;

/// What stands in for a secret wherever a target or URL is shown.
pub const REDACTED: &str = "***";

/// Query parameters whose values are shown: pprof's own (`debug`, `gc`, `seconds`) and the
/// `filter` heapwatch asks Envoy's `/stats` with. Any other value may be a token.
const SHOWN_PARAMETERS: [&str; 4] = ["debug", "gc", "seconds", "filter"];

/// pprof's own parameters: they belong to the heap URL as given and are not carried to the
/// other endpoints (a token is).
const PPROF_PARAMETERS: [&str; 3] = ["debug", "gc", "seconds"];

/// A value that must never be shown: `Debug` prints `***`, and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// A target string (`http://alice:pw@host:6060`, `envoy:http://…`, `agent:…`, `proc:…`):
/// shown as [`redact`] makes it, kept whole only for the source that connects to it.
#[derive(Clone)]
pub struct Target {
    shown: String,
    given: Secret,
}

impl Target {
    pub fn new(given: &str) -> Target {
        Target {
            shown: redact(given),
            given: Secret::new(given),
        }
    }

    /// The target as it may be shown and kept (`run.json`, messages, labels).
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    /// The URL of an `http(s)://` target, or of an `envoy:http(s)://` one without its prefix,
    /// split for requests; `None` when the target is not such a URL.
    pub(crate) fn url(&self) -> Option<TargetUrl> {
        let given = self.given.expose();
        TargetUrl::parse(given.strip_prefix("envoy:").unwrap_or(given))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shown, f)
    }
}

impl From<&str> for Target {
    fn from(given: &str) -> Target {
        Target::new(given)
    }
}

impl From<&String> for Target {
    fn from(given: &String) -> Target {
        Target::new(given)
    }
}

impl From<&Target> for Target {
    fn from(target: &Target) -> Target {
        target.clone()
    }
}

/// For clap: every target is a `Target` from the moment it is read.
impl FromStr for Target {
    type Err = std::convert::Infallible;

    fn from_str(given: &str) -> Result<Target, Self::Err> {
        Ok(Target::new(given))
    }
}

/// The shown form of a target or URL: a password becomes `***` (`http://alice:***@host`), a
/// user name without a password (often a token) becomes `***`, and so does the value of every
/// query parameter but pprof's own. Text that is not a URL is returned as it is.
pub fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let parts = UrlParts::split(rest);
    let mut shown = format!("{scheme}://");
    if let Some(info) = parts.userinfo {
        match info.split_once(':') {
            Some((user, _)) => shown.push_str(&format!("{user}:{REDACTED}@")),
            None => shown.push_str(&format!("{REDACTED}@")),
        }
    }
    shown.push_str(parts.host);
    shown.push_str(parts.path);
    if let Some(query) = parts.query {
        let params: Vec<String> = query.split('&').map(shown_parameter).collect();
        shown.push('?');
        shown.push_str(&params.join("&"));
    }
    if let Some(fragment) = parts.fragment {
        shown.push('#');
        shown.push_str(fragment);
    }
    shown
}

/// `text` as [`redact`] shows it but with no user info at all, scheme or none, parsable or
/// not: how a push server is named.
pub fn without_userinfo(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("", text),
    };
    let rest = userinfo_end(rest).map_or(rest, |at| &rest[at + 1..]);
    if scheme.is_empty() {
        let shown = redact(&format!("x://{rest}"));
        shown["x://".len()..].to_string()
    } else {
        redact(&format!("{scheme}://{rest}"))
    }
}

/// A target field of `run.json` (`#[serde(with = "crate::source::target::shown")]`): written
/// and read back only in its shown form, so a run never holds a target's secrets, even one
/// recorded by a version that kept them.
pub mod shown {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(target: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::redact(target))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        String::deserialize(d).map(|t| super::redact(&t))
    }
}

fn shown_parameter(param: &str) -> String {
    let name = param.split_once('=').map_or(param, |(name, _)| name);
    if param.is_empty() || SHOWN_PARAMETERS.contains(&name) {
        param.to_string()
    } else if param.contains('=') {
        format!("{name}={REDACTED}")
    } else {
        REDACTED.to_string()
    }
}

/// The pieces of what follows `scheme://`, as written.
struct UrlParts<'a> {
    userinfo: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    fn split(rest: &'a str) -> UrlParts<'a> {
        let (userinfo, after) = match userinfo_end(rest) {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (after, fragment) = match after.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (after, None),
        };
        let (after, query) = match after.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (after, None),
        };
        let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
        UrlParts {
            userinfo,
            host,
            path,
            query,
            fragment,
        }
    }
}

/// Where the user info of what follows `scheme://` ends (its `@`), if it has one.
///
/// As a URL parser reads it, the authority ends at the first `/`, `?` or `#`, and the last
/// `@` within it ends the user info. But a password is often pasted as it is, with a `/`,
/// `#`, `?`, `@` or `:` in it: `alice:p/a#ss?w@host` would leave `alice` the host and the
/// rest of the password the path and fragment, shown in every message. So once the text
/// starts with `user:` and an `@` follows that leaves a host behind it, the user info runs to
/// the last such `@`. `host:6060/…` stays a host and port unless such an `@` comes before
/// any query (a pprof path has none). A user name alone (a token) is read as a parser reads
/// it.
fn userinfo_end(rest: &str) -> Option<usize> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let plain = authority.rfind('@');
    let Some(colon) = rest.find(':') else {
        return plain;
    };
    let user = &rest[..colon];
    if user.contains(['/', '?', '#', '@']) {
        return plain;
    }
    let mut hosts = rest
        .match_indices('@')
        .map(|(at, _)| at)
        .filter(|&at| at > colon && leaves_a_host(&rest[at + 1..]));
    let after_colon = &authority[(colon + 1).min(authority.len())..];
    let is_port = plain.is_none()
        && colon < authority_end
        && !after_colon.is_empty()
        && after_colon.bytes().all(|b| b.is_ascii_digit());
    if is_port {
        // `host:6060/…`, unless an `@` leaving a host comes before any query or fragment:
        // then the digits begin a password (a pprof path has no `@`).
        let query = rest.find(['?', '#']).unwrap_or(rest.len());
        return hosts.rfind(|&at| at < query);
    }
    hosts.next_back().or(plain)
}

/// Whether `text` starts with a host (and port) as a URL has one: name, address or
/// `[v6]`, then the end, `/`, `?` or `#`.
fn leaves_a_host(text: &str) -> bool {
    let host = &text[..text.find(['/', '?', '#']).unwrap_or(text.len())];
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_~%:[]".contains(&b))
}

/// An `http(s)://` URL split for requests: the origin without user info (its credentials
/// become an `Authorization: Basic` header), the path, and the query parameters as written.
pub(crate) struct TargetUrl {
    /// `scheme://host:port`.
    origin: String,
    /// The path as written, without a trailing `/`.
    pub(crate) path: String,
    params: Vec<String>,
    /// `Authorization: Basic …` for the user info, when there is one.
    pub(crate) basic: Option<Secret>,
    /// Every secret the URL holds (password, lone user, query values), as written and
    /// decoded, for the client to keep out of any text it passes on.
    pub(crate) secrets: Vec<String>,
}

impl TargetUrl {
    fn parse(url: &str) -> Option<TargetUrl> {
        let (scheme, rest) = url.split_once("://")?;
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let parts = UrlParts::split(rest);
        let mut secrets = Vec::new();
        let basic = parts.userinfo.map(|info| {
            let (user, password) = match info.split_once(':') {
                Some((user, password)) => {
                    secrets.push(password.to_string());
                    (user, password)
                }
                None => {
                    secrets.push(info.to_string());
                    (info, "")
                }
            };
            let (user, password) = (percent_decode(user), percent_decode(password));
            secrets.push(password.clone());
            if !info.contains(':') {
                secrets.push(user.clone());
            }
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            secrets.push(encoded.clone());
            Secret::new(format!("Basic {encoded}"))
        });
        let params: Vec<String> = parts
            .query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        for param in &params {
            if shown_parameter(param) != *param {
                let value = param.split_once('=').map_or(param.as_str(), |(_, v)| v);
                secrets.push(value.to_string());
                secrets.push(percent_decode(value));
            }
        }
        Some(TargetUrl {
            origin: format!("{scheme}://{}", parts.host),
            path: parts.path.trim_end_matches('/').to_string(),
            params,
            basic,
            secrets,
        })
    }

    /// The URL of `path` on this origin. `own` are the endpoint's own parameters; after them
    /// come the target's: all of them with `all_params` (the heap URL as given), else those
    /// that are not pprof's own (a token reaches every endpoint).
    pub(crate) fn endpoint(&self, path: &str, own: &[&str], all_params: bool) -> Endpoint {
        let carried = self.params.iter().filter(|p| {
            let name = p.split_once('=').map_or(p.as_str(), |(name, _)| name);
            all_params || !PPROF_PARAMETERS.contains(&name)
        });
        let params: Vec<&str> = own
            .iter()
            .copied()
            .chain(carried.map(String::as_str))
            .collect();
        let mut url = format!("{}{path}", self.origin);
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        Endpoint {
            shown: redact(&url),
            url: Secret::new(url),
        }
    }
}

/// A URL a source requests: `url` as sent (it may hold a token), `shown` for every message.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub(crate) url: Secret,
    pub(crate) shown: String,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `%XX` escapes decoded, as reqwest decodes the user info of a URL for Basic auth.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// A secret shorter than this is replaced only where it stands alone (not inside a longer
/// run of letters and digits): a two-letter password must not turn `unauthorized` into
/// `un***uthorized`, while a long one is replaced wherever it shows.
const SCRUB_ANYWHERE: usize = 8;

/// The userinfo percent-encode set of the WHATWG URL standard: how a URL's password is
/// written when it is encoded.
const USERINFO: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'/')
    .add(b':')
    .add(b';')
    .add(b'=')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'|')
    .add(b'%');

/// Secrets in the order [`scrub`] replaces them: each with its percent-encoded forms (a
/// server echoing a request line shows them so), longest first (a header value before the
/// token inside it), each once, none empty.
pub(crate) fn scrub_order(secrets: Vec<String>) -> Vec<String> {
    let mut all = Vec::with_capacity(secrets.len() * 3);
    for secret in secrets {
        for encoded in [
            percent_encoding::utf8_percent_encode(&secret, USERINFO).to_string(),
            percent_encoding::utf8_percent_encode(&secret, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        ] {
            if encoded != secret {
                all.push(encoded);
            }
        }
        all.push(secret);
    }
    all.retain(|s| !s.is_empty());
    all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    all.dedup();
    all
}

/// `text` with every one of `secrets` (in [`scrub_order`]) replaced by `***`: for text that
/// comes from outside (an error page, a library's error) and may echo what was sent. A
/// secret shorter than [`SCRUB_ANYWHERE`] is replaced where it stands alone.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_string();
    for secret in secrets {
        if !text.contains(secret.as_str()) {
            continue;
        }
        if secret.len() >= SCRUB_ANYWHERE {
            text = text.replace(secret.as_str(), REDACTED);
        } else {
            text = replace_alone(&text, secret);
        }
    }
    text
}

/// `text` with `secret` replaced where neither neighbour continues a word with it.
fn replace_alone(text: &str, secret: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let starts_word = word(secret.chars().next());
    let ends_word = word(secret.chars().next_back());
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (at, _) in text.match_indices(secret) {
        if at < rest {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + secret.len()..].chars().next();
        let inside = (starts_word && word(before)) || (ends_word && word(after));
        if !inside {
            out.push_str(&text[rest..at]);
            out.push_str(REDACTED);
            rest = at + secret.len();
        }
    }
    out.push_str(&text[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown_and_the_user_may_stay() {
        let t = Target::new("http://alice:s3cretpw@127.0.0.1:6060");
        assert_eq!(t.as_str(), "http://alice:***@127.0.0.1:6060");
        assert_eq!(t.to_string(), t.as_str());
        assert_eq!(format!("{t:?}"), "\"http://alice:***@127.0.0.1:6060\"");
        let envoy = Target::new("envoy:https://admin:pw%40x@10.0.0.2:15000/");
        assert_eq!(envoy.as_str(), "envoy:https://admin:***@10.0.0.2:15000/");
        // A user name alone is most often a token.
        assert_eq!(redact("https://ghp_abc@host/x"), "https://***@host/x");
        // An '@' in the password: the last one ends the user info.
        assert_eq!(redact("http://a:p@ss@h:1"), "http://a:***@h:1");
    }

    #[test]
    fn a_password_pasted_with_url_delimiters_in_it_is_still_the_password() {
        for (given, shown) in [
            (
                "http://alice:p/a#ss?w@h:1/x?debug=1",
                "http://alice:***@h:1/x?debug=1",
            ),
            ("http://alice:p/a#ss?w@h:1", "http://alice:***@h:1"),
            ("http://alice:1234/5@h:1/x", "http://alice:***@h:1/x"),
            ("http://alice:p@x/y@h/z", "http://alice:***@h/z"),
            (
                "http://alice:w:x@y?z@[::1]:6060/",
                "http://alice:***@[::1]:6060/",
            ),
            (
                "http://alice:p%2Fa%23ss%3Fw%40x%3Ay@h:1/",
                "http://alice:***@h:1/",
            ),
            (
                "envoy:https://admin:a#b@10.0.0.2:15000",
                "envoy:https://admin:***@10.0.0.2:15000",
            ),
            // Not user info: a host and port, and an '@' in the query.
            ("http://h:6060/x?email=a@b.c", "http://h:6060/x?email=***"),
            ("http://h/x?email=a@b.c#top", "http://h/x?email=***#top"),
        ] {
            assert_eq!(redact(given), shown, "{given}");
        }
        let url = Target::new("http://alice:p/a#ss?w@h:1/x?debug=1")
            .url()
            .unwrap();
        assert_eq!(
            (url.origin.as_str(), url.path.as_str()),
            ("http://h:1", "/x")
        );
        // base64("alice:p/a#ss?w")
        assert_eq!(
            url.basic.as_ref().unwrap().expose(),
            "Basic YWxpY2U6cC9hI3NzP3c="
        );
    }

    #[test]
    fn without_user_info_even_what_is_not_a_url_loses_its_credentials() {
        for (given, shown) in [
            ("http://1234:glc_secret@h:99999/", "http://h:99999/"),
            ("1234:glc_secret@h:4040", "h:4040"),
            ("glc_secret@h:4040/?token=t", "h:4040/?token=***"),
            ("127.0.0.1:4040", "127.0.0.1:4040"),
            ("http://u:p/w@h", "http://h"),
        ] {
            assert_eq!(without_userinfo(given), shown, "{given}");
        }
    }

    #[test]
    fn query_values_are_hidden_but_pprofs_own() {
        assert_eq!(
            redact("http://h:1/debug/pprof/heap?debug=1&token=abc&gc=1&k"),
            "http://h:1/debug/pprof/heap?debug=1&token=***&gc=1&***"
        );
        assert_eq!(redact("agent:tcp:127.0.0.1:1"), "agent:tcp:127.0.0.1:1");
        assert_eq!(redact("proc:exe:ctrl"), "proc:exe:ctrl");
        assert_eq!(redact("http://127.0.0.1:6060"), "http://127.0.0.1:6060");
    }

    #[test]
    fn credentials_become_basic_auth_and_leave_the_url() {
        let url = Target::new("http://alice:s3cret%2Fpw@h:1/x/?token=t0k&debug=1")
            .url()
            .unwrap();
        assert_eq!(url.origin, "http://h:1");
        assert_eq!(url.path, "/x");
        // base64("alice:s3cret/pw")
        assert_eq!(
            url.basic.as_ref().unwrap().expose(),
            "Basic YWxpY2U6czNjcmV0L3B3"
        );
        let heap = url.endpoint("/x", &[], true);
        assert_eq!(heap.url.expose(), "http://h:1/x?token=t0k&debug=1");
        assert_eq!(heap.shown, "http://h:1/x?token=***&debug=1");
        let other = url.endpoint("/debug/pprof/heap", &["debug=1"], false);
        assert_eq!(
            other.url.expose(),
            "http://h:1/debug/pprof/heap?debug=1&token=t0k"
        );
        for secret in ["s3cret%2Fpw", "s3cret/pw", "t0k", "YWxpY2U6czNjcmV0L3B3"] {
            assert!(url.secrets.iter().any(|s| s == secret), "{secret}");
        }
        assert!(!url.secrets.iter().any(|s| s == "alice"));
        assert!(Target::new("ftp://h").url().is_none());
        assert!(Target::new("agent:4242").url().is_none());
    }

    #[test]
    fn scrubbing_replaces_the_longest_secret_first() {
        let secrets = vec!["Bearer tok3n".to_string(), "tok3n".to_string()];
        assert_eq!(
            scrub("got Bearer tok3n, and tok3n again", &secrets),
            "got ***, and *** again"
        );
        assert_eq!(format!("{:?}", Secret::new("x")), "***");
    }

    #[test]
    fn a_short_secret_is_scrubbed_where_it_stands_alone_not_inside_words() {
        let secrets = scrub_order(vec!["au".into(), "p/w".into(), "s3cretpw-long".into()]);
        assert_eq!(
            scrub("unauthorized: user alice password au (au)", &secrets),
            "unauthorized: user alice password *** (***)"
        );
        // Its percent-encoded forms too, and a long one anywhere.
        assert_eq!(
            scrub("GET /x?pw=p%2Fw HTTP/1.1 p/w xs3cretpw-longx", &secrets),
            "GET /x?pw=*** HTTP/1.1 *** x***x"
        );
    }
}
