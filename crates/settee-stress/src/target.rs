//! The server under test: `http://[user:pass@]host:port` parsed once, and
//! plain TCP connections to it.
//!
//! Invariant: only loopback addresses are accepted (`127.0.0.0/8`, `::1`,
//! `localhost`). Hostile traffic and a thousand-client soak are meant for a
//! server on this machine, never for one across a network.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use base64::Engine as _;
use tokio::net::TcpStream;

/// Where the requests go, and as whom.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` header value (`host:port` as given).
    pub host: String,
    /// `user:password` of a server admin, if the URL has one.
    pub credentials: Option<(String, String)>,
}

impl Target {
    /// Parses `http://[user:pass@]host:port[/]`. Refuses anything that does
    /// not resolve to a loopback address, and any path (a server root only).
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err(format!("{url}: give the server root, without a path"));
        }
        let (credentials, hostport) = match rest.rsplit_once('@') {
            Some((userinfo, hp)) => {
                let (u, p) = userinfo
                    .split_once(':')
                    .ok_or_else(|| format!("{url}: credentials must be user:password"))?;
                let dec = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8()
                        .map(|c| c.into_owned())
                        .map_err(|_| format!("{url}: credentials are not UTF-8"))
                };
                (Some((dec(u)?, dec(p)?)), hp)
            }
            None => (None, rest),
        };
        let addr = hostport
            .to_socket_addrs()
            .map_err(|e| format!("{url}: cannot resolve {hostport}: {e}"))?
            .find(|a| is_loopback(a.ip()))
            .ok_or_else(|| format!("{url}: {hostport} is not a loopback address (refused)"))?;
        Ok(Target {
            addr,
            host: hostport.to_string(),
            credentials,
        })
    }

    /// `Basic …` for the admin credentials, if any.
    pub fn basic_auth(&self) -> Option<String> {
        self.credentials.as_ref().map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        })
    }

    /// A new connection (TCP_NODELAY), bounded by `timeout`.
    pub async fn connect(&self, timeout: Duration) -> std::io::Result<TcpStream> {
        let s = tokio::time::timeout(timeout, TcpStream::connect(self.addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v| v.is_loopback()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_loopback_urls_only() {
        let t = Target::parse("http://admin:p%40ss@127.0.0.1:5984/").unwrap();
        assert_eq!(t.addr.port(), 5984);
        assert_eq!(t.host, "127.0.0.1:5984");
        assert_eq!(
            t.credentials,
            Some(("admin".to_string(), "p@ss".to_string()))
        );
        assert_eq!(t.basic_auth().unwrap(), "Basic YWRtaW46cEBzcw==");
        assert!(Target::parse("http://10.1.2.3:5984").is_err());
        assert!(Target::parse("https://127.0.0.1:5984").is_err());
        assert!(Target::parse("http://127.0.0.1:5984/db").is_err());
        assert!(Target::parse("http://localhost:5984").is_ok());
    }
}
