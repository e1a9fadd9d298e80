//! Where clients reach the gateway, and the `Host` header check. Absolute URLs handed to clients
//! (a direct upload's `upload_url`) are built from a configured or host-given base URL, never from
//! a request header; a `Host` that is not a plain `host[:port]` is refused before any handler runs.

use super::error::ApiError;
use axum::extract::Request;
use axum::http::header::HOST;
use axum::http::uri::{Scheme, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::Ipv6Addr;

/// An `http(s)://host[:port][/prefix]` URL the gateway is reachable at, without a trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicBaseUrl(String);

/// Why a configured public URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid public URL {}: {reason}", crate::user_text::excerpt(.url))]
pub struct InvalidPublicUrl {
    url: String,
    reason: &'static str,
}

impl PublicBaseUrl {
    /// Check `url`: scheme `http` or `https`, a plain host (optional port), an optional path
    /// prefix, no query or fragment.
    pub fn parse(url: &str) -> Result<Self, InvalidPublicUrl> {
        let invalid = |reason| InvalidPublicUrl {
            url: url.to_owned(),
            reason,
        };
        let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        let scheme = uri.scheme().ok_or_else(|| invalid("it has no scheme"))?;
        if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
            return Err(invalid("the scheme must be http or https"));
        }
        let authority = uri.authority().ok_or_else(|| invalid("it has no host"))?;
        if !is_plain_host(authority.as_str()) {
            return Err(invalid(
                "the host must be a DNS name, an IPv4 address or [IPv6], with an optional port",
            ));
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(invalid("it must not have a query or fragment"));
        }
        let path = uri.path().trim_end_matches('/');
        Ok(Self(format!("{scheme}://{authority}{path}")))
    }

    /// The base URL of a server listening on `address` (`http://127.0.0.1:3000`, `http://[::1]:3000`).
    pub fn for_listener(address: std::net::SocketAddr) -> Self {
        Self(format!("http://{address}"))
    }

    /// `https://{domain}` plus `/{stage}` unless the stage is API Gateway's `$default` (served at
    /// the root); `None` when `domain` is not a plain host name.
    #[cfg(feature = "aws")]
    pub(crate) fn for_api_gateway(domain: &str, stage: Option<&str>) -> Option<Self> {
        if !is_plain_host(domain) {
            return None;
        }
        let prefix = match stage {
            None | Some("") | Some("$default") => String::new(),
            Some(stage)
                if stage
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
            {
                format!("/{stage}")
            }
            Some(_) => return None,
        };
        Some(Self(format!("https://{domain}{prefix}")))
    }

    /// The absolute URL of `path` (which starts with `/`).
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `host[:port]` where host is a DNS name or IPv4 address (letters, digits, `-`, `_`, dot-separated
/// labels) or a bracketed IPv6 address, and port is 1 to 5 digits up to 65535.
pub(crate) fn is_plain_host(value: &str) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else {
            return false;
        };
        if address.parse::<Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            _ => match after.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return false,
            },
        }
    } else {
        match value.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(value), None),
        }
    };
    let host_ok = host.is_none_or(is_dns_name);
    let port_ok = port.is_none_or(|port| {
        !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
    });
    host_ok && port_ok
}

fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Refuse a request whose `Host` header is not a plain `host[:port]` (or is sent twice) with a
/// 400 envelope; a request without `Host` (HTTP/1.0) passes.
pub(crate) async fn reject_unusual_host(request: Request, next: Next) -> Response {
    let mut hosts = request.headers().get_all(HOST).iter();
    let first = hosts.next();
    let plain = match (first, hosts.next()) {
        (None, _) => true,
        (Some(host), None) => host.to_str().is_ok_and(is_plain_host),
        (Some(_), Some(_)) => false,
    };
    if plain {
        next.run(request).await
    } else {
        ApiError::invalid_request(
            "Invalid 'Host' header: send one Host header holding a host name or IP address with an optional port.",
        )
        .with_param("Host")
        .with_code("invalid_host")
        .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_hosts_pass() {
        for host in [
            "localhost",
            "localhost:3000",
            "127.0.0.1",
            "127.0.0.1:65535",
            "api.example.com",
            "abc123.execute-api.us-east-1.amazonaws.com",
            "my_host.internal:8080",
            "[::1]",
            "[::1]:3000",
            "[2001:db8::1]:443",
            "example.com.",
        ] {
            assert!(is_plain_host(host), "{host}");
        }
    }

    #[test]
    fn poisoned_hosts_fail() {
        for host in [
            "",
            "evil.example:443/steal?x=",
            "evil.example/steal",
            "user@evil.example",
            "evil.example:",
            "evil.example:65536",
            "evil.example:123456",
            "evil.example:80:80",
            "evil example",
            "evil.example?x",
            "evil.example#x",
            "[::1",
            "[::1]x",
            "[not-ip]:80",
            "::1",
            "-evil.example",
            "evil..example",
            "evil.example%2f",
            ".",
        ] {
            assert!(!is_plain_host(host), "{host}");
        }
        assert!(!is_plain_host(&"a".repeat(300)));
    }

    #[test]
    fn public_urls_are_checked_and_normalised() {
        let url = PublicBaseUrl::parse("https://api.example.com/prod/").unwrap();
        assert_eq!(
            url.join("/v1/files/f/content"),
            "https://api.example.com/prod/v1/files/f/content"
        );
        assert_eq!(
            PublicBaseUrl::parse("http://[::1]:3000").unwrap().as_str(),
            "http://[::1]:3000"
        );
        for bad in [
            "ftp://example.com",
            "example.com",
            "http://user@example.com",
            "http://example.com?x=1",
            "http://example.com/#x",
            "/relative",
        ] {
            assert!(PublicBaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listener_and_api_gateway_urls() {
        let address: std::net::SocketAddr = "127.0.0.1:3000".parse().unwrap();
        assert_eq!(PublicBaseUrl::for_listener(address).as_str(), "http://127.0.0.1:3000");
        let address: std::net::SocketAddr = "[::1]:8080".parse().unwrap();
        assert_eq!(PublicBaseUrl::for_listener(address).as_str(), "http://[::1]:8080");
        let domain = "abc.execute-api.us-east-1.amazonaws.com";
        assert_eq!(
            PublicBaseUrl::for_api_gateway(domain, Some("$default"))
                .unwrap()
                .as_str(),
            format!("https://{domain}")
        );
        assert_eq!(
            PublicBaseUrl::for_api_gateway(domain, Some("prod")).unwrap().as_str(),
            format!("https://{domain}/prod")
        );
        assert!(PublicBaseUrl::for_api_gateway("evil.example/x", None).is_none());
        assert!(PublicBaseUrl::for_api_gateway(domain, Some("a/b")).is_none());
    }
}
