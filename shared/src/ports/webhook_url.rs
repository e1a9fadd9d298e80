//! Which webhook URLs Nimbus will call (server-side request forgery guard, part one).
//!
//! [`WebhookUrl::parse`] runs the checks possible when a URL is submitted: https only, on port 443
//! (http, and any port, only to a loopback host on a development server), no user name or password,
//! and an IP-literal host must be a public address. Host names are resolved and their addresses checked by the transport on
//! every attempt ([`forbidden_address`], [`UrlPolicy::permits_address`]), because DNS answers change.

use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// The longest webhook URL accepted, in bytes.
pub(crate) const MAX_WEBHOOK_URL_BYTES: usize = 2048;
/// The one port webhooks go to (https's). Other ports would let a tenant probe which services
/// listen where.
pub(crate) const WEBHOOK_PORT: u16 = 443;

/// Where webhooks may go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UrlPolicy {
    /// Development servers only: allow loopback hosts (127.0.0.0/8, ::1, `localhost`) on any port,
    /// and plain http to `127.0.0.1`, `localhost` and `[::1]`. Private and reserved ranges stay
    /// refused, and every other host is https on port 443.
    pub allow_loopback_http: bool,
}

impl UrlPolicy {
    /// Whether a webhook may connect to `ip`: a public address, or a loopback one when allowed.
    pub(crate) fn permits_address(&self, ip: IpAddr) -> bool {
        !forbidden_address(ip) || (self.allow_loopback_http && ip.is_loopback())
    }
}

/// Why a webhook URL is refused. Messages quote the client's text only through [`excerpt`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookUrlError {
    #[error("the webhook URL is empty")]
    Empty,
    #[error("the webhook URL is {bytes} bytes long; at most {MAX_WEBHOOK_URL_BYTES} are accepted")]
    TooLong { bytes: usize },
    #[error("the webhook URL is not a valid absolute URL ({reason}): '{url}'")]
    Invalid { reason: String, url: String },
    #[error("the webhook URL must use https, not '{scheme}'")]
    Scheme { scheme: String },
    #[error("the webhook URL must use https (http is accepted only for 127.0.0.1, localhost and [::1] on a development server)")]
    PlainHttp,
    #[error("the webhook URL must use port 443 (https's own), not {port}")]
    Port { port: u16 },
    #[error("the webhook URL must not contain a user name or password")]
    Userinfo,
    #[error("the webhook URL has no host")]
    MissingHost,
    #[error("the webhook URL's host '{host}' is a loopback host, which only a development server may call")]
    Loopback { host: String },
    #[error("the webhook URL's host '{host}' is a private, reserved or internal address")]
    ForbiddenAddress { host: String },
}

/// A webhook URL that passed the submit-time checks of some [`UrlPolicy`].
///
/// It serializes as its string. Deserializing checks the syntax only: a stored URL was checked
/// when submitted, and the transport checks it again (and every address it resolves to) before
/// each attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String)]
pub struct WebhookUrl(Url);

impl WebhookUrl {
    /// Reads and checks a submitted URL.
    pub fn parse(text: &str, policy: &UrlPolicy) -> Result<Self, WebhookUrlError> {
        if text.is_empty() {
            return Err(WebhookUrlError::Empty);
        }
        if text.len() > MAX_WEBHOOK_URL_BYTES {
            return Err(WebhookUrlError::TooLong { bytes: text.len() });
        }
        let url = Url::parse(text).map_err(|e| WebhookUrlError::Invalid {
            reason: e.to_string(),
            url: excerpt(text).into_owned(),
        })?;
        let url = Self(url);
        url.check(policy)?;
        Ok(url)
    }

    /// The checks of [`WebhookUrl::parse`] on this URL under `policy` (the transport repeats them).
    pub fn check(&self, policy: &UrlPolicy) -> Result<(), WebhookUrlError> {
        let url = &self.0;
        let host = url.host().ok_or(WebhookUrlError::MissingHost)?;
        match url.scheme() {
            "https" => {}
            "http" if policy.allow_loopback_http && is_plain_http_host(&host) => {}
            "http" => return Err(WebhookUrlError::PlainHttp),
            other => {
                return Err(WebhookUrlError::Scheme {
                    scheme: excerpt(other).into_owned(),
                })
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(WebhookUrlError::Userinfo);
        }
        let loopback_allowed = policy.allow_loopback_http && is_loopback_host(&host);
        match url.port_or_known_default() {
            Some(WEBHOOK_PORT) => {}
            _ if loopback_allowed => {}
            other => {
                return Err(WebhookUrlError::Port {
                    port: other.unwrap_or_default(),
                })
            }
        }
        let ip = match host {
            Host::Domain(name) if is_loopback_name(name) && !policy.allow_loopback_http => {
                return Err(WebhookUrlError::Loopback {
                    host: excerpt(name).into_owned(),
                });
            }
            Host::Domain(_) => return Ok(()),
            Host::Ipv4(v4) => IpAddr::V4(v4),
            Host::Ipv6(v6) => IpAddr::V6(v6),
        };
        if policy.permits_address(ip) {
            Ok(())
        } else if ip.is_loopback() {
            Err(WebhookUrlError::Loopback { host: ip.to_string() })
        } else {
            Err(WebhookUrlError::ForbiddenAddress { host: ip.to_string() })
        }
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn url(&self) -> &Url {
        &self.0
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl TryFrom<String> for WebhookUrl {
    type Error = url::ParseError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Url::parse(&text).map(Self)
    }
}

impl From<WebhookUrl> for String {
    fn from(url: WebhookUrl) -> Self {
        url.0.into()
    }
}

/// `localhost` and the names under it (RFC 6761), with or without the final dot.
pub(crate) fn is_loopback_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// A loopback name or address (which a development server may call on any port).
fn is_loopback_host(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(name) => is_loopback_name(name),
        Host::Ipv4(v4) => v4.is_loopback(),
        Host::Ipv6(v6) => v6.is_loopback(),
    }
}

/// The three hosts plain http may reach on a development server.
fn is_plain_http_host(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        Host::Ipv4(v4) => *v4 == Ipv4Addr::LOCALHOST,
        Host::Ipv6(v6) => *v6 == Ipv6Addr::LOCALHOST,
    }
}

/// IPv4 ranges a webhook must never reach: "this network", private, carrier-grade NAT, loopback,
/// link-local (instance metadata 169.254.169.254, ECS 169.254.170.2), IETF protocol assignments,
/// documentation, 6to4 relay anycast, benchmarking, multicast, reserved and broadcast.
const FORBIDDEN_V4: [(Ipv4Addr, u8); 15] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 0, 0, 0), 24),
    (Ipv4Addr::new(192, 0, 2, 0), 24),
    (Ipv4Addr::new(192, 88, 99, 0), 24),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(198, 18, 0, 0), 15),
    (Ipv4Addr::new(198, 51, 100, 0), 24),
    (Ipv4Addr::new(203, 0, 113, 0), 24),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// IPv6 ranges refused outright: the IPv4-compatible block (holds `::` and `::1`), local-use NAT64,
/// discard-only, Teredo, benchmarking (2001:2::/48), ORCHID (2001:10::/28, deprecated) and ORCHIDv2
/// (2001:20::/28), documentation (2001:db8::/32 and 3fff::/20), segment routing SIDs (5f00::/16),
/// site-local (deprecated), unique local (holds the EC2 metadata address fd00:ec2::254), link-local
/// and multicast.
const FORBIDDEN_V6: [(Ipv6Addr, u8); 14] = [
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),
    (Ipv6Addr::new(0x2001, 0x2, 0, 0, 0, 0, 0, 0), 48),
    (Ipv6Addr::new(0x2001, 0x10, 0, 0, 0, 0, 0, 0), 28),
    (Ipv6Addr::new(0x2001, 0x20, 0, 0, 0, 0, 0, 0), 28),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32),
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

/// Whether `ip` is in a range no webhook may reach (loopback included; see
/// [`UrlPolicy::permits_address`] for the development exception). IPv6 addresses that embed an
/// IPv4 one (IPv4-mapped `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, NAT64 `64:ff9b::/96`,
/// 6to4 `2002::/16`) are judged by the embedded address.
pub(crate) fn forbidden_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    FORBIDDEN_V4
        .iter()
        .any(|(net, len)| prefix_matches_v4(bits, u32::from(*net), *len))
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(embedded) = embedded_v4(ip) {
        return forbidden_v4(embedded);
    }
    let bits = u128::from(ip);
    FORBIDDEN_V6
        .iter()
        .any(|(net, len)| prefix_matches_v6(bits, u128::from(*net), *len))
}

/// The IPv4 address carried inside a mapped, translated, NAT64 or 6to4 IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let mapped = u128::from(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0));
    let translated = u128::from(Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0));
    let nat64 = u128::from(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0));
    let six_to_four = u128::from(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0));
    if prefix_matches_v6(bits, mapped, 96)
        || prefix_matches_v6(bits, translated, 96)
        || prefix_matches_v6(bits, nat64, 96)
    {
        Some(low32)
    } else if prefix_matches_v6(bits, six_to_four, 16) {
        Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32))
    } else {
        None
    }
}

fn prefix_matches_v4(bits: u32, net: u32, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    bits & mask == net & mask
}

fn prefix_matches_v6(bits: u128, net: u128, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    bits & mask == net & mask
}

#[cfg(test)]
#[path = "webhook_url_tests.rs"]
mod tests;
