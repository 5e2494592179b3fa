//! Receive offloads that merge packets before capture (GRO, LRO): warn about
//! them, or turn them off for the capture and back on at exit.

use ringcap_source::interface::short_feature_name;
use ringcap_source::Interface;
use std::process::Command;

/// Offloads turned off by `--fix-offloads`, restored on drop.
#[derive(Debug, Default)]
pub struct OffloadGuard {
    restore: Vec<(String, Vec<String>)>,
}

impl OffloadGuard {
    /// Checks each interface: warns (once per interface) about merging
    /// offloads, or turns them off when `fix` is set.
    pub fn check(interfaces: &[Interface], fix: bool) -> Result<OffloadGuard, String> {
        let mut guard = OffloadGuard::default();
        for iface in interfaces {
            let on = iface.merging_offloads();
            if on.is_empty() {
                continue;
            }
            let short: Vec<&str> = on.iter().map(|f| short_feature_name(f)).collect();
            let off_args: String = short.iter().map(|s| format!(" {s} off")).collect();
            if fix {
                let mut cmd = Command::new("ethtool");
                cmd.arg("-K").arg(&iface.name);
                for s in &short {
                    cmd.arg(s).arg("off");
                }
                let status = cmd.status().map_err(|e| format!("running ethtool: {e}"))?;
                if !status.success() {
                    return Err(format!(
                        "could not turn off offloads on {} (ethtool -K {}{off_args} failed)",
                        iface.name, iface.name
                    ));
                }
                eprintln!(
                    "ringcap: turned off {} on {} for the capture (restored on exit)",
                    on.join(", "),
                    iface.name
                );
                guard.restore.push((
                    iface.name.clone(),
                    short.iter().map(|s| s.to_string()).collect(),
                ));
            } else {
                eprintln!(
                    "ringcap: warning: {} merges received packets before capture ({} on): captured packets may be larger than on the wire. Fix: ethtool -K {}{off_args}  (or use --fix-offloads)",
                    iface.name,
                    on.join(", "),
                    iface.name
                );
            }
        }
        Ok(guard)
    }
}

impl Drop for OffloadGuard {
    fn drop(&mut self) {
        for (name, features) in &self.restore {
            let mut cmd = Command::new("ethtool");
            cmd.arg("-K").arg(name);
            for f in features {
                cmd.arg(f).arg("on");
            }
            match cmd.status() {
                Ok(s) if s.success() => {}
                _ => eprintln!(
                    "ringcap: could not restore offloads on {name}: run ethtool -K {name} {} on",
                    features.join(" on ")
                ),
            }
        }
    }
}
