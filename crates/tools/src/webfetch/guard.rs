//! The network guard: which addresses a fetch may reach, decided on the
//! address actually connected to — DNS answers filtered in the resolver,
//! IP literals checked before any connection. The host lists compare an
//! address as an address, in every spelling a URL can carry it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::error::Error as StdError;

use super::{MAX_REDIRECTS, Refused};
use reqwest::Url;

/// The host rules, shared by the first request and every redirect.
#[derive(Debug, Clone)]
pub(super) struct AddressRules {
    pub(super) allow_private: bool,
    pub(super) allow_hosts: Vec<String>,
    pub(super) deny_hosts: Vec<String>,
}

impl AddressRules {
    /// Whether to follow a redirect to `url` after `hops` earlier ones: at
    /// most [`MAX_REDIRECTS`], each target checked like the first URL.
    pub(super) fn redirect(&self, hops: usize, url: &Url) -> Result<(), Refused> {
        if hops > MAX_REDIRECTS {
            return Err(Refused(format!("more than {MAX_REDIRECTS} redirects")));
        }
        self.check(url)
            .map_err(|refused| Refused(format!("a redirect was refused: {refused}")))
    }

    /// Checks a URL before any connection: scheme, host lists, IP literals.
    pub(super) fn check(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused(format!(
                "only http and https URLs can be fetched, not {}:",
                url.scheme()
            )));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => Host::Name(d.trim_end_matches('.').to_ascii_lowercase()),
            Some(url::Host::Ipv4(ip)) => Host::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Host::Ip(IpAddr::V6(ip)),
            None => return Err(Refused("the URL has no host".into())),
        };
        if self.deny_hosts.iter().any(|entry| host.matches(entry)) {
            return Err(Refused(format!("{host} is on the deny list")));
        }
        if !self.allow_hosts.is_empty() && !self.allow_hosts.iter().any(|e| host.matches(e)) {
            return Err(Refused(format!(
                "{host} is not on the allow list ({})",
                self.allow_hosts.join(", ")
            )));
        }
        if let Host::Ip(ip) = host
            && !self.allow_private
            && is_forbidden(ip)
        {
            return Err(Refused(format!("{ip} is a private or reserved address")));
        }
        Ok(())
    }

    /// Whether `ip`, an address a host name resolved to, is on the deny
    /// list in any of its spellings.
    fn denies(&self, ip: IpAddr) -> bool {
        let host = Host::Ip(ip);
        self.deny_hosts.iter().any(|entry| host.matches(entry))
    }

    /// Whether a connection to `ip`, an address a host name resolved to,
    /// is allowed. The allow list was met by the name already.
    fn admits(&self, ip: IpAddr) -> bool {
        (self.allow_private || !is_forbidden(ip)) && !self.denies(ip)
    }
}

/// A URL's host as the lists compare it: a name (lower-case, no trailing
/// dot), or an address.
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Whether the list entry `entry` names this host. A name matches the name
    /// and its subdomains; an address matches an address entry as an address
    /// (docs/tools.md, "webfetch"): `::ffff:127.0.0.1`, `::ffff:7f00:1`,
    /// `::127.0.0.1`, `::ffff:0:127.0.0.1` and `64:ff9b::7f00:1` are all
    /// `127.0.0.1`, and `[0:0:0:0:0:0:0:1]` is `::1`. (The URL parser has
    /// already read `2130706433`, `0x7f000001`, `0177.0.0.1` and `127.1` as
    /// `127.0.0.1`.)
    fn matches(&self, entry: &str) -> bool {
        match (self, entry_ip(entry)) {
            (Host::Ip(ip), Some(listed)) => plain_ip(*ip) == plain_ip(listed),
            (Host::Name(name), None) => {
                name == entry
                    || name
                        .strip_suffix(entry)
                        .is_some_and(|head| head.ends_with('.'))
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The address a list entry names, in any spelling (`127.1`, `[::1]`,
/// `0:0:0:0:0:0:0:1`); `None` for a host name.
fn entry_ip(entry: &str) -> Option<IpAddr> {
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    match url::Host::parse(entry).ok()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// An address as the lists compare it: an IPv6 address that carries an
/// IPv4 one (mapped, compatible, translated, NAT64) is that IPv4 address;
/// the unspecified address, which a connection on Linux takes to this
/// host, is the loopback address (`0.0.0.0` is `127.0.0.1`, `::` is `::1`).
fn plain_ip(ip: IpAddr) -> IpAddr {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    }
}

/// Loopback, private, link-local (metadata included), CGNAT, unspecified,
/// multicast, broadcast and other reserved addresses — and the same inside
/// IPv4-mapped, IPv4-compatible and NAT64 IPv6 forms.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        }
    }
}

pub(super) fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] == 0 // "this network"
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // CGNAT 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240 // reserved
}

/// The IPv4 address inside `::ffff:a.b.c.d` (mapped), `::a.b.c.d`
/// (compatible), `::ffff:0:a.b.c.d` (translated, SIIT) or
/// `64:ff9b::a.b.c.d` (NAT64).
pub(super) fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0, 0, 0, 0, 0] && s[5] == 0xffff;
    let compatible = s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified();
    let translated = s[..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0];
    (mapped || compatible || translated || nat64).then_some(tail)
}

/// Resolves host names and keeps only addresses the guard allows — not
/// private or reserved (unless allowed), not on the deny list in any
/// spelling — so the connection is made to a checked address.
pub(super) struct GuardedResolver {
    pub(super) rules: Arc<AddressRules>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let rules = self.rules.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| rules.admits(a.ip()))
                .collect();
            if allowed.is_empty() {
                let why = if found.is_empty() {
                    format!("{host} does not resolve")
                } else if let Some(denied) = found.iter().find(|a| rules.denies(a.ip())) {
                    format!(
                        "{host} resolves to {}, which is on the deny list",
                        denied.ip()
                    )
                } else {
                    format!("{host} resolves to a private or reserved address")
                };
                return Err(Box::new(Refused(why)) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
