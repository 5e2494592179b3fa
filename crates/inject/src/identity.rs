//! What frames injected on an interface carry as their source: the
//! interface's own MAC and addresses, read from the kernel when a session
//! starts injecting (and again when a reload rebuilds its guard), never
//! from the client.

/// What the frames leaving an interface carry as their source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// Its IPv4 address, if it has one.
    pub ipv4: Option<[u8; 4]>,
    /// Its IPv6 address (a global one if it has one, else link-local).
    pub ipv6: Option<[u8; 16]>,
    /// Its MTU (frames may be this plus the Ethernet header).
    pub mtu: u32,
    /// Its index (what names it while it lives, whatever it is renamed to).
    pub index: i32,
}

impl Identity {
    /// The identity of interface `name` (in this network namespace).
    pub fn of(name: &str) -> Result<Identity, String> {
        let interface =
            ringcap_source::interface::Interface::open(name).map_err(|e| e.to_string())?;
        let path = format!("/sys/class/net/{name}/address");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut mac = [0u8; 6];
        let parts: Vec<&str> = text.trim().split(':').collect();
        if parts.len() != 6 {
            return Err(format!("{path}: not a MAC address: {}", text.trim()));
        }
        for (m, p) in mac.iter_mut().zip(parts) {
            *m = u8::from_str_radix(p, 16).map_err(|_| format!("{path}: not a MAC address"))?;
        }
        let mut ipv4 = None;
        let mut ipv6: Option<[u8; 16]> = None;
        let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("getifaddrs: {e}"))?;
        for a in addrs.filter(|a| a.interface_name == name) {
            let Some(addr) = a.address else { continue };
            if let Some(v4) = addr.as_sockaddr_in() {
                ipv4.get_or_insert(v4.ip().octets());
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                let o = v6.ip().octets();
                let link_local = o[0] == 0xfe && o[1] & 0xc0 == 0x80;
                if ipv6.is_none() || !link_local {
                    ipv6 = Some(o);
                }
            }
        }
        Ok(Identity {
            mac,
            ipv4,
            ipv6,
            mtu: interface.mtu,
            index: interface.index,
        })
    }
}

impl Identity {
    /// The longest frame it sends: the MTU plus the Ethernet header.
    pub fn max_len(&self) -> usize {
        self.mtu as usize + 14
    }
}
