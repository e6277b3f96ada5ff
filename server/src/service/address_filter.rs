//! Which addresses the server may fetch from on a client's behalf (image
//! URLs): globally reachable unicast addresses only, plus the operator's
//! allow list (`[limits] remote_image_allow`). Never loopback, private,
//! link-local, CGNAT, multicast, broadcast, documentation or otherwise
//! reserved space, nor the IPv4-mapped or NAT64 form of any of those.
//!
//! Every address is checked where it is known for certain, so a fetch can
//! only ever connect to an address that passed:
//! - an address written in the URL (`http://127.0.0.1/`, and every form
//!   the URL parser reads as one: `2130706433`, `0x7f.1`, `[::ffff:7f00:1]`)
//!   is checked before any connection, on the first URL and on every
//!   redirect hop ([`AddressFilter::check_url`], [`AddressFilter::redirect_policy`]);
//! - a host name is resolved by [`AddressFilter::resolver`], the HTTP
//!   client's own resolver, which hands the client only the addresses that
//!   pass. There is no second lookup between the check and the connection
//!   (no DNS rebinding window).

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// IPv4 blocks that are not globally reachable (IANA's special-purpose
/// registry, RFC 6890 and its updates), refused whole.
const V4_NOT_GLOBAL: [Ipv4Net; 15] = [
    v4(0, 0, 0, 0, 8),       // "this network"; 0.0.0.0 reaches the host itself
    v4(10, 0, 0, 0, 8),      // private (RFC 1918)
    v4(100, 64, 0, 0, 10),   // shared address space (CGNAT, RFC 6598)
    v4(127, 0, 0, 0, 8),     // loopback
    v4(169, 254, 0, 0, 16),  // link-local (cloud metadata services)
    v4(172, 16, 0, 0, 12),   // private
    v4(192, 0, 0, 0, 24),    // IETF protocol assignments
    v4(192, 0, 2, 0, 24),    // documentation (TEST-NET-1)
    v4(192, 88, 99, 0, 24),  // 6to4 relay anycast (deprecated)
    v4(192, 168, 0, 0, 16),  // private
    v4(198, 18, 0, 0, 15),   // benchmarking
    v4(198, 51, 100, 0, 24), // documentation (TEST-NET-2)
    v4(203, 0, 113, 0, 24),  // documentation (TEST-NET-3)
    v4(224, 0, 0, 0, 4),     // multicast
    v4(240, 0, 0, 0, 4),     // reserved, and 255.255.255.255 (broadcast)
];

/// IPv6 global unicast (2000::/3); everything outside it is refused
/// (unspecified, loopback, IPv4-compatible, discard-only, unique local,
/// link-local, site-local, multicast, ...) except the two forms below
/// that carry an IPv4 address.
const V6_GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

/// Blocks inside 2000::/3 that are not globally reachable, refused whole.
const V6_NOT_GLOBAL: [Ipv6Net; 4] = [
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), // IETF protocol assignments (Teredo, ...)
    v6([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32), // documentation
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), // 6to4 (an IPv4 address inside)
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), // documentation (RFC 9637)
];

/// NAT64's well-known prefix (RFC 6052): the last 32 bits are an IPv4
/// address, which decides.
const V6_NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// Whether `ip` is a globally reachable unicast address: one the server
/// may fetch from without the operator's say-so.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    !V4_NOT_GLOBAL.iter().any(|net| net.contains(&ip))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    if V6_NAT64.contains(&ip) {
        let [.., a, b, c, d] = ip.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    V6_GLOBAL_UNICAST.contains(&ip) && !V6_NOT_GLOBAL.iter().any(|net| net.contains(&ip))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is, so the allow
/// list matches either form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Reads one entry of `remote_image_allow`: an address (`192.168.1.10`,
/// `fd00::5`) or a block in CIDR notation (`10.0.0.0/8`).
///
/// # Errors
/// A message saying what the entry should look like.
pub fn parse_allow_entry(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("`{text}` is neither an IP address nor a CIDR block (such as 10.0.0.0/8)")
        })
}

/// Why a fetch was refused before it could connect (for the log; the
/// client is told only that the image could not be fetched).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A scheme other than http and https.
    #[error("the scheme `{0}` is not fetched (only http and https)")]
    Scheme(String),
    /// `user:password@` in the URL.
    #[error("URLs with a user name or password are not fetched")]
    UserInfo,
    /// A URL without a host.
    #[error("the URL has no host")]
    NoHost,
    /// An address in the URL outside the filter.
    #[error("{0} is not a public address (and not in limits.remote_image_allow)")]
    Address(IpAddr),
    /// A host name none of whose addresses passes.
    #[error("`{name}` resolves only to addresses that are not public: {addresses:?}")]
    Name {
        /// The name.
        name: String,
        /// What it resolved to.
        addresses: Vec<IpAddr>,
    },
    /// More redirects than allowed.
    #[error("more than {0} redirects")]
    Redirects(usize),
}

/// The address filter: public addresses, and the operator's allow list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressFilter {
    allow: Arc<[IpNet]>,
}

impl AddressFilter {
    /// A filter that also lets through the addresses in `allow`.
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self {
            allow: allow.into(),
        }
    }

    /// Whether the server may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.allow.iter().any(|net| net.contains(&ip)) || is_public(ip)
    }

    /// Checks a URL before it is fetched (the first one and every redirect
    /// target): http or https, no user info, and an address written in it
    /// permitted. A host name passes here; its addresses are checked by
    /// [`Self::resolver`] when the client connects.
    ///
    /// # Errors
    /// Why the URL is refused.
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::UserInfo);
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(Refusal::NoHost)?;
        // The same test the HTTP client's connector makes to decide between
        // an address (connected to as it is) and a name (resolved).
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        match literal.parse::<IpAddr>() {
            Ok(ip) if !self.permits(ip) => Err(Refusal::Address(ip)),
            _ => Ok(()),
        }
    }

    /// The resolver for the HTTP client: a name's addresses, without those
    /// the filter refuses; none left is an error.
    pub fn resolver(&self) -> Arc<FilteringResolver> {
        Arc::new(FilteringResolver {
            filter: self.clone(),
        })
    }

    /// Follows at most `max_hops` redirects, each target checked as the
    /// first URL was.
    pub fn redirect_policy(&self, max_hops: usize) -> reqwest::redirect::Policy {
        let filter = self.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            // `previous` holds the first URL and every hop before this one.
            if attempt.previous().len() > max_hops {
                return attempt.error(Refusal::Redirects(max_hops));
            }
            match filter.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refusal) => attempt.error(refusal),
            }
        })
    }
}

/// A DNS resolver that keeps only the addresses an [`AddressFilter`]
/// permits; the HTTP client connects to nothing else.
#[derive(Debug)]
pub struct FilteringResolver {
    filter: AddressFilter,
}

impl Resolve for FilteringResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let filter = self.filter.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                found.into_iter().partition(|a| filter.permits(a.ip()));
            if kept.is_empty() {
                let addresses = refused.iter().map(SocketAddr::ip).collect();
                return Err(
                    Box::new(Refusal::Name { name, addresses }) as Box<dyn Error + Send + Sync>
                );
            }
            if !refused.is_empty() {
                tracing::debug!(%name, ?refused, "image host: addresses left out by the filter");
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_globally_reachable_addresses_are_public() {
        let refused = [
            // IPv4
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.0.0.2",
            "127.255.255.255",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            // IPv6
            "::",
            "::1",
            "::7f00:1",  // IPv4-compatible (deprecated)
            "::8.8.8.8", // IPv4-compatible, even of a public address
            "100::1",    // discard-only
            "fc00::1",   // unique local
            "fd12:3456::1",
            "fe80::1", // link-local
            "febf:ffff::1",
            "fec0::1", // site-local (deprecated)
            "ff02::1", // multicast
            "ff0e::1",
            "2001:db8::1", // documentation
            "3fff::1",
            "2001::1",        // Teredo
            "2002:7f00:1::1", // 6to4
            "64:ff9b:1::1",   // local-use NAT64
            "5f00::1",        // SRv6
            // IPv4-mapped and NAT64 forms of refused IPv4 addresses
            "::ffff:127.0.0.1",
            "::ffff:7f00:1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:100.64.0.1",
            "::ffff:0.0.0.0",
            "::ffff:255.255.255.255",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ];
        for text in refused {
            assert!(!is_public(ip(text)), "{text} should not be public");
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for text in public {
            assert!(is_public(ip(text)), "{text} should be public");
        }
    }

    #[test]
    fn the_allow_list_lets_its_addresses_through_in_either_form() {
        let filter = AddressFilter::new(vec![
            parse_allow_entry("192.168.1.10").unwrap(),
            parse_allow_entry("10.0.0.0/8").unwrap(),
            parse_allow_entry(" fd00::/8 ").unwrap(),
        ]);
        for allowed in [
            "192.168.1.10",
            "::ffff:192.168.1.10",
            "10.1.2.3",
            "fd00::5",
            "8.8.8.8",
        ] {
            assert!(filter.permits(ip(allowed)), "{allowed}");
        }
        for refused in ["192.168.1.11", "127.0.0.1", "fe80::1", "::ffff:172.16.0.1"] {
            assert!(!filter.permits(ip(refused)), "{refused}");
        }
        assert!(!AddressFilter::default().permits(ip("192.168.1.10")));
    }

    #[test]
    fn allow_entries_are_addresses_or_blocks() {
        assert_eq!(
            parse_allow_entry("10.0.0.0/8").unwrap(),
            "10.0.0.0/8".parse::<IpNet>().unwrap()
        );
        assert_eq!(
            parse_allow_entry("fd00::5").unwrap(),
            "fd00::5/128".parse::<IpNet>().unwrap()
        );
        for bad in ["", "lan-server", "10.0.0.0/33", "10.0.0/8", "192.168.1.300"] {
            let err = parse_allow_entry(bad).unwrap_err();
            assert!(err.contains("CIDR"), "{bad}: {err}");
        }
    }

    #[test]
    fn urls_are_checked_against_the_address_they_really_name() {
        let filter = AddressFilter::default();
        let check = |text: &str| filter.check_url(&Url::parse(text).unwrap());
        let loopback = Err(Refusal::Address(ip("127.0.0.1")));
        // Every spelling the URL parser reads as 127.0.0.1.
        for text in [
            "http://127.0.0.1:8080/metrics",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0x7f000001/",
            "http://017700000001/",
            "http://127.1/",
            "http://%31%32%37.0.0.1/",
            "HTTP://127.0.0.1./",
        ] {
            assert_eq!(check(text), loopback, "{text}");
        }
        assert_eq!(check("http://0/"), Err(Refusal::Address(ip("0.0.0.0"))));
        assert_eq!(check("http://[::1]:80/"), Err(Refusal::Address(ip("::1"))));
        assert_eq!(
            check("http://[::ffff:127.0.0.1]/"),
            Err(Refusal::Address(ip("::ffff:127.0.0.1")))
        );
        assert_eq!(
            check("http://169.254.169.254/latest/meta-data/"),
            Err(Refusal::Address(ip("169.254.169.254")))
        );
        assert_eq!(
            check("http://10.0.0.1/"),
            Err(Refusal::Address(ip("10.0.0.1")))
        );
        // User info is refused whatever the host.
        assert_eq!(
            check("http://example.com@127.0.0.1/"),
            Err(Refusal::UserInfo)
        );
        assert_eq!(
            check("https://user:pw@example.com/a.png"),
            Err(Refusal::UserInfo)
        );
        assert_eq!(check("http://:pw@example.com/"), Err(Refusal::UserInfo));
        // Only http and https (a redirect may name any scheme).
        assert_eq!(
            check("file:///etc/passwd"),
            Err(Refusal::Scheme("file".into()))
        );
        assert_eq!(
            check("ftp://example.com/a.png"),
            Err(Refusal::Scheme("ftp".into()))
        );
        // Names pass here; the resolver checks what they resolve to.
        assert_eq!(check("https://example.com/a.png"), Ok(()));
        assert_eq!(check("http://localhost:8080/"), Ok(()));
        assert_eq!(check("http://8.8.8.8/a.png"), Ok(()));
        assert_eq!(check("http://[2606:4700:4700::1111]/a.png"), Ok(()));
        // The allow list opens an address in any spelling.
        let lan = AddressFilter::new(vec![parse_allow_entry("127.0.0.2").unwrap()]);
        assert_eq!(
            lan.check_url(&Url::parse("http://2130706434/").unwrap()),
            Ok(())
        );
        assert!(
            lan.check_url(&Url::parse("http://127.0.0.1/").unwrap())
                .is_err()
        );
    }

    #[tokio::test]
    async fn the_resolver_hands_over_only_permitted_addresses() {
        let resolve = |filter: &AddressFilter, name: &str| {
            filter.resolver().resolve(name.parse::<Name>().unwrap())
        };
        let err = match resolve(&AddressFilter::default(), "localhost").await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(err) => err,
        };
        let refusal = err.downcast_ref::<Refusal>().expect("a refusal");
        assert!(matches!(refusal, Refusal::Name { name, .. } if name == "localhost"));
        // With loopback allowed, localhost resolves to its loopback
        // addresses, and only those.
        let filter = AddressFilter::new(vec![
            parse_allow_entry("127.0.0.0/8").unwrap(),
            parse_allow_entry("::1").unwrap(),
        ]);
        let addrs: Vec<SocketAddr> = resolve(&filter, "localhost").await.unwrap().collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
