//! The cap on WebSocket connections (`[websocket] max_connections` and
//! `max_connections_per_ip`). A connection takes a slot before its upgrade
//! is answered and holds it until it closes, so a client over the cap gets
//! a plain HTTP refusal and costs the server nothing more.
//!
//! Addresses are counted as the client's IP; an IPv6 client is counted by
//! its /64 network, the block one host is usually given, so that it cannot
//! slip past the limit by changing its low bits.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use parking_lot::Mutex;

/// Why a WebSocket connection was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The server holds its limit of connections.
    #[error(
        "too many WebSocket connections: {limit} are open, the limit of \
         websocket.max_connections; try again later"
    )]
    Full {
        /// The limit.
        limit: usize,
    },
    /// The client's address holds its limit of connections.
    #[error(
        "too many WebSocket connections from this address: {limit} are open, the limit of \
         websocket.max_connections_per_ip; try again later"
    )]
    FullForAddress {
        /// The limit.
        limit: usize,
    },
}

/// The open WebSocket connections, counted in total and per address.
#[derive(Debug)]
pub struct WsSlots {
    max_total: usize,
    /// 0: no limit per address.
    max_per_ip: usize,
    // parking_lot: two counter updates, never held across an await.
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Only addresses with a connection open (no entry at zero).
    per_ip: HashMap<IpAddr, usize>,
}

/// A slot held by one connection; dropping it frees the slot.
#[derive(Debug)]
pub struct WsSlot {
    slots: Arc<WsSlots>,
    ip: Option<IpAddr>,
}

impl WsSlots {
    /// At most `max_total` connections, and `max_per_ip` from one address
    /// (0: no limit per address).
    pub fn new(max_total: usize, max_per_ip: usize) -> Self {
        Self {
            max_total,
            max_per_ip,
            counts: Mutex::default(),
        }
    }

    /// Takes a slot for a connection from `peer` (`None`: address unknown,
    /// counted in the total only).
    ///
    /// # Errors
    /// The limit that is reached.
    pub fn acquire(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<WsSlot, Refusal> {
        let ip = peer.filter(|_| self.max_per_ip > 0).map(address_key);
        let mut counts = self.counts.lock();
        if counts.total >= self.max_total {
            return Err(Refusal::Full {
                limit: self.max_total,
            });
        }
        if let Some(ip) = ip {
            let open = counts.per_ip.entry(ip).or_default();
            if *open >= self.max_per_ip {
                return Err(Refusal::FullForAddress {
                    limit: self.max_per_ip,
                });
            }
            *open += 1;
        }
        counts.total += 1;
        Ok(WsSlot {
            slots: Arc::clone(self),
            ip,
        })
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().total
    }
}

impl Drop for WsSlot {
    fn drop(&mut self) {
        let mut counts = self.slots.counts.lock();
        counts.total -= 1;
        if let Some(ip) = self.ip {
            if let Some(open) = counts.per_ip.get_mut(&ip) {
                *open -= 1;
                if *open == 0 {
                    counts.per_ip.remove(&ip);
                }
            }
        }
    }
}

/// The key an address is counted under: IPv4 as it is (also when it
/// arrives mapped into IPv6), IPv6 by its /64 network.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(network))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn the_total_is_capped_and_a_closed_connection_frees_its_slot() {
        let slots = Arc::new(WsSlots::new(2, 0));
        let first = slots.acquire(ip("10.0.0.1")).unwrap();
        let _second = slots.acquire(ip("10.0.0.2")).unwrap();
        assert_eq!(
            slots.acquire(ip("10.0.0.3")).unwrap_err(),
            Refusal::Full { limit: 2 }
        );
        drop(first);
        assert_eq!(slots.open(), 1);
        slots.acquire(ip("10.0.0.3")).unwrap();
    }

    #[test]
    fn one_address_is_capped_without_touching_the_others() {
        let slots = Arc::new(WsSlots::new(10, 2));
        let a = [
            slots.acquire(ip("10.0.0.1")).unwrap(),
            slots.acquire(ip("::ffff:10.0.0.1")).unwrap(),
        ];
        let refused = slots.acquire(ip("10.0.0.1")).unwrap_err();
        assert_eq!(refused, Refusal::FullForAddress { limit: 2 });
        assert!(
            refused
                .to_string()
                .contains("websocket.max_connections_per_ip")
        );
        slots.acquire(ip("10.0.0.2")).unwrap();
        slots.acquire(None).unwrap();
        drop(a);
        slots.acquire(ip("10.0.0.1")).unwrap();
        assert!(
            slots.counts.lock().per_ip.is_empty(),
            "no entry is left at zero"
        );
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_network() {
        let slots = Arc::new(WsSlots::new(10, 1));
        let _held = slots.acquire(ip("2001:db8:1:2::1")).unwrap();
        assert!(slots.acquire(ip("2001:db8:1:2:ffff::9")).is_err());
        slots.acquire(ip("2001:db8:1:3::1")).unwrap();
    }
}
