//! A box's synthetic addresses: every name its DNS allowed gets one from `198.18.0.0/15` (the
//! benchmarking block, never a real destination), stable for the box's life, so a connection to
//! it names exactly what the box asked for and the box never learns a real address. The pool
//! holds at most `capacity` names; past it the least recently used name that no connection
//! holds (see [`Pool::hold`]) gives its address up.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use crate::name::Name;

/// The first and last addresses handed out (`198.18.0.1` to `198.19.255.254`).
const FIRST: u32 = u32::from_be_bytes([198, 18, 0, 1]);
const LAST: u32 = u32::from_be_bytes([198, 19, 255, 254]);

#[derive(Debug)]
struct Entry {
    name: Name,
    /// When it was last handed out or looked up (the pool's clock).
    used: u64,
    /// Connections that hold it.
    holds: u32,
}

/// True for an address of the synthetic block (`198.18.0.0/15`), handed out or not.
pub fn is_synthetic(a: Ipv4Addr) -> bool {
    (FIRST - 1..=LAST + 1).contains(&u32::from(a))
}

/// The pool (see the module comment).
#[derive(Debug)]
pub struct Pool {
    capacity: usize,
    by_name: HashMap<Name, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, Entry>,
    /// Recency order: clock -> address.
    order: BTreeMap<u64, Ipv4Addr>,
    clock: u64,
    next: u32,
}

/// Why no address could be handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("every synthetic address is held by a live connection ({held} names)")]
pub struct Exhausted {
    pub held: usize,
}

impl Pool {
    /// A pool of at most `capacity` names (clamped to the block's 131070 addresses).
    pub fn new(capacity: usize) -> Pool {
        Pool {
            capacity: capacity.clamp(1, (LAST - FIRST + 1) as usize),
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
            next: FIRST,
        }
    }

    fn touch(&mut self, addr: Ipv4Addr) {
        self.clock += 1;
        if let Some(e) = self.by_addr.get_mut(&addr) {
            self.order.remove(&e.used);
            e.used = self.clock;
            self.order.insert(self.clock, addr);
        }
    }

    /// The name's address, handing one out the first time.
    pub fn address_of(&mut self, name: &Name) -> Result<Ipv4Addr, Exhausted> {
        if let Some(&a) = self.by_name.get(name) {
            self.touch(a);
            return Ok(a);
        }
        let addr = if self.by_addr.len() < self.capacity {
            let a = Ipv4Addr::from(self.next);
            self.next += 1;
            a
        } else {
            let victim = self
                .order
                .values()
                .copied()
                .find(|a| self.by_addr[a].holds == 0)
                .ok_or(Exhausted {
                    held: self.by_addr.len(),
                })?;
            let old = self
                .by_addr
                .remove(&victim)
                .expect("ordered addresses are mapped");
            self.order.remove(&old.used);
            self.by_name.remove(&old.name);
            victim
        };
        self.by_name.insert(name.clone(), addr);
        self.by_addr.insert(
            addr,
            Entry {
                name: name.clone(),
                used: 0,
                holds: 0,
            },
        );
        self.touch(addr);
        Ok(addr)
    }

    /// The name behind a synthetic address; None for an address this pool never handed out
    /// (or gave up), which a connection must be refused for.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&Name> {
        self.by_addr.get(&addr).map(|e| &e.name)
    }

    /// A connection to `addr` starts: its name stays bound until [`Pool::release`].
    pub fn hold(&mut self, addr: Ipv4Addr) -> Option<Name> {
        let e = self.by_addr.get_mut(&addr)?;
        e.holds += 1;
        let name = e.name.clone();
        self.touch(addr);
        Some(name)
    }

    pub fn release(&mut self, addr: Ipv4Addr) {
        if let Some(e) = self.by_addr.get_mut(&addr) {
            e.holds = e.holds.saturating_sub(1);
        }
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn a_name_keeps_its_address_and_addresses_come_from_the_benchmarking_block() {
        let mut p = Pool::new(100);
        let a = p.address_of(&n("a.example")).unwrap();
        let b = p.address_of(&n("b.example")).unwrap();
        assert_ne!(a, b);
        assert_eq!(p.address_of(&n("A.example.")).unwrap(), a);
        assert_eq!(p.name_of(a), Some(&n("a.example")));
        for x in [a, b] {
            assert_eq!(
                crate::class::classify(x.into(), &[]),
                Some(crate::Class::Benchmarking)
            );
        }
        assert_eq!(
            p.name_of(Ipv4Addr::new(198, 18, 9, 9)),
            None,
            "never issued"
        );
    }

    #[test]
    fn past_capacity_the_least_recently_used_unheld_name_gives_its_address_up() {
        let mut p = Pool::new(2);
        let a = p.address_of(&n("a.example")).unwrap();
        let b = p.address_of(&n("b.example")).unwrap();
        assert_eq!(p.hold(a), Some(n("a.example")));
        // a is older but held: b goes.
        let c = p.address_of(&n("c.example")).unwrap();
        assert_eq!(c, b);
        assert_eq!(p.name_of(a), Some(&n("a.example")));
        assert_eq!(p.name_of(c), Some(&n("c.example")));
        assert_eq!(p.len(), 2);
        // Both held: nothing to give.
        p.hold(c);
        assert_eq!(p.address_of(&n("d.example")), Err(Exhausted { held: 2 }));
        p.release(a);
        assert_eq!(p.address_of(&n("d.example")).unwrap(), a);
        assert_eq!(p.name_of(a), Some(&n("d.example")));
    }

    #[test]
    fn a_lookup_refreshes_a_name_against_eviction() {
        let mut p = Pool::new(2);
        let a = p.address_of(&n("a.example")).unwrap();
        p.address_of(&n("b.example")).unwrap();
        p.address_of(&n("a.example")).unwrap();
        p.address_of(&n("c.example")).unwrap();
        assert_eq!(
            p.name_of(a),
            Some(&n("a.example")),
            "b was the least recent"
        );
    }
}
