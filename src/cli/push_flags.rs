//! The flags `heapwatch push` and `collect --push` share — where to push, how to
//! authenticate, how to label and how hard to retry — and their translation into the
//! library's `Destination`, `ConnectClient` and `PushOptions`, written once for both.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use heapwatch::decode::DecodeLimits;
use heapwatch::push::settings::parse_label;
use heapwatch::push::{Backoff, ConnectClient, Destination, LabelFlags, PushOptions};
use heapwatch::units;

use super::CliError;

#[derive(clap::Args, Clone)]
pub struct PushFlags {
    /// `service_name` of every capture (default: the app id the agent reported, else the
    /// executable's name). Kept in the run: later pushes of it use it unless given another.
    #[arg(long)]
    pub service: Option<String>,
    /// A label for every capture, NAME=VALUE, as Alloy's external labels (cluster, namespace,
    /// pod, env; repeatable). Kept in the run like --service; NAME= takes a kept one away.
    #[arg(id = "push_label", long = "push-label", value_name = "NAME=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Do not send a capture equal to the one before it (same data between the same two
    /// GCs): fewer points; see docs/pyroscope.md for what an in-use query then shows.
    #[arg(long)]
    pub skip_duplicates: bool,
    /// Header sent with every push, "Name: value", e.g. "Authorization: Bearer TOKEN" or
    /// "Authorization: Basic BASE64" (repeatable). @FILE reads such lines from FILE, which
    /// keeps a token out of the process list.
    #[arg(id = "push_header", long = "push-header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Tenant of a multi-tenant Pyroscope (sent as X-Scope-OrgID).
    #[arg(id = "push_tenant", long = "push-tenant", value_name = "ID")]
    pub tenant: Option<String>,
    /// PEM CA certificate(s) to verify the server with, in place of the bundled roots.
    #[arg(id = "push_cacert", long = "push-cacert", value_name = "PEM")]
    pub cacert: Option<PathBuf>,
    /// Per-request timeout, connecting included [default: 10s].
    #[arg(
        id = "push_timeout",
        long = "push-timeout",
        value_name = "DURATION",
        value_parser = units::parse_duration_flag
    )]
    pub timeout: Option<Duration>,
    /// Send each capture stamped with the push time, its own time kept in the
    /// `heapwatch_captured_at` label: for captures older than the server's ingestion window
    /// (an hour by default in Pyroscope). Also retries captures refused without it. (A server
    /// whose window is opened instead stores old profiles, but a query over their own time
    /// finds them only if they were pushed within about a day: see docs/pyroscope.md.)
    #[arg(long)]
    pub restamp: bool,
    /// Longest wait between two attempts (the backoff doubles from 250ms up to it)
    /// [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration_flag)]
    pub retry_max: Option<Duration>,
}

/// `--push-timeout` and `--retry-max` when not given (no clap default, so that `collect`
/// can tell a push flag given without `--push`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(10);

impl PushFlags {
    /// The server, its headers (`@FILE`s read) and TLS roots.
    pub fn destination(&self, url: &str) -> Result<Destination, CliError> {
        let headers = super::headers::read_headers("--push-header", &self.headers)?
            .into_iter()
            .map(|(name, value)| (name, value.expose().to_string()))
            .collect();
        Ok(Destination {
            url: url.to_string(),
            tenant: self.tenant.clone(),
            headers,
            cacert: self.cacert.clone(),
            timeout: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
        })
    }

    /// The destination and a client for it: a bad URL, header or CA file is a usage error
    /// before anything is sent (or collected). `flag` names the URL's flag in the message.
    pub fn client(&self, flag: &str, url: &str) -> Result<(Destination, ConnectClient), CliError> {
        let destination = self.destination(url)?;
        let client =
            ConnectClient::new(&destination).map_err(|e| CliError::Usage(format!("{flag} {e}")))?;
        Ok((destination, client))
    }

    /// `--service` and `--push-label`; both name the service once at most.
    pub fn labels(&self) -> Result<LabelFlags, CliError> {
        let named: Vec<&str> = self
            .labels
            .iter()
            .filter(|(k, _)| k == "service_name")
            .map(|(_, v)| v.as_str())
            .chain(self.service.as_deref())
            .collect();
        if named.windows(2).any(|w| w[0] != w[1]) {
            return Err(CliError::Usage(format!(
                "--service and --push-label service_name=… name two services ({}): give one",
                named.join(", ")
            )));
        }
        Ok(LabelFlags {
            service: self.service.clone(),
            labels: self.labels.clone(),
        })
    }

    /// How the push behaves; `give_up_after: None` keeps trying (a live push, bounded by
    /// its drain at exit). Failing runs are told on stderr as "heapwatch: push: URL: why;
    /// retrying".
    pub fn options(
        &self,
        shown_to: &str,
        give_up_after: Option<Duration>,
        limits: DecodeLimits,
    ) -> Result<PushOptions, CliError> {
        let shown_to = shown_to.to_string();
        let retry_max = self.retry_max.unwrap_or(DEFAULT_RETRY_MAX);
        Ok(PushOptions {
            labels: self.labels()?,
            restamp: self.restamp,
            retry: Default::default(),
            skip_duplicates: self.skip_duplicates,
            backoff: Backoff {
                first: Duration::from_millis(250).min(retry_max),
                max: retry_max,
            },
            give_up_after,
            request_timeout: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
            limits,
            on_failing: Some(Arc::new(move |why: &str| {
                eprintln!("heapwatch: push: {shown_to}: {why}; retrying");
            })),
        })
    }

    /// Flags given that only mean something with a URL to push to.
    pub fn given(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        if self.service.is_some() {
            given.push("--service");
        }
        if !self.labels.is_empty() {
            given.push("--push-label");
        }
        if self.skip_duplicates {
            given.push("--skip-duplicates");
        }
        if !self.headers.is_empty() {
            given.push("--push-header");
        }
        if self.tenant.is_some() {
            given.push("--push-tenant");
        }
        if self.cacert.is_some() {
            given.push("--push-cacert");
        }
        if self.restamp {
            given.push("--restamp");
        }
        if self.timeout.is_some() {
            given.push("--push-timeout");
        }
        if self.retry_max.is_some() {
            given.push("--retry-max");
        }
        given
    }
}
