//! Connection options shared by the tools, and the resolution of database
//! arguments into [`Db`] handles with operator-friendly error messages.

use std::path::PathBuf;
use std::time::Duration;

use settee_client::{Client, ClientOptions, Db, Error, RetryPolicy};

use super::ToolError;

/// How to reach the servers.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Connection")]
pub struct ConnArgs {
    /// Server URL for bare database names (may carry user:password@).
    #[arg(
        long,
        env = "SETTEE_URL",
        default_value = "http://127.0.0.1:5984",
        hide_env_values = true
    )]
    pub server: String,
    /// Extra trusted CA certificates (PEM file).
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<PathBuf>,
    /// Client certificate for TLS client authentication (PEM; needs --key).
    #[arg(long, value_name = "PEM")]
    pub cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(long, value_name = "PEM")]
    pub key: Option<PathBuf>,
    /// HTTP(S) proxy for all requests, e.g. http://proxy:3128.
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Seconds without a complete answer before a request counts as stalled.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
    /// Seconds to establish a connection.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub connect_timeout: u64,
    /// Retries (with exponential backoff) after connection errors and 5xx answers.
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
}

impl ConnArgs {
    pub fn client(&self) -> Result<Client, ToolError> {
        self.client_with_retries(self.retries)
    }

    /// A client with another retry count (e.g. a long-running follower
    /// that should outlast a server restart).
    pub fn client_with_retries(&self, retries: u32) -> Result<Client, ToolError> {
        let opts = ClientOptions {
            ca_file: self.cacert.clone(),
            client_cert: self.cert.clone(),
            client_key: self.key.clone(),
            proxy: self.proxy.clone(),
            connect_timeout: Duration::from_secs(self.connect_timeout.max(1)),
            request_timeout: Duration::from_secs(self.timeout.max(1)),
            retry: RetryPolicy {
                retries,
                ..RetryPolicy::default()
            },
            ..ClientOptions::default()
        };
        Client::new(opts).map_err(|e| ToolError::Fatal(e.to_string()))
    }

    /// A database handle for a URL or bare name.
    pub fn db(&self, client: &Client, spec: &str) -> Result<Db, ToolError> {
        Db::new(client.clone(), spec, &self.server).map_err(|e| ToolError::Fatal(e.to_string()))
    }
}

/// Turns a client error on `db` into a message an operator can act on.
pub fn explain(db: &Db, what: &str, e: Error) -> ToolError {
    let msg = match &e {
        Error::Couch { status: 401, .. } => format!(
            "{what} {}: not authorized (401): check the user and password in the URL or SETTEE_URL ({e})",
            db.display()
        ),
        Error::Couch { status: 403, .. } => format!(
            "{what} {}: forbidden (403): the user lacks permission ({e})",
            db.display()
        ),
        Error::Couch { status: 404, .. } => {
            format!("{what} database {} does not exist ({e})", db.display())
        }
        Error::Connect { .. } => format!("{what} server unreachable: {e}"),
        _ => format!("{what} {}: {e}", db.display()),
    };
    ToolError::Fatal(msg.trim_start().to_string())
}
