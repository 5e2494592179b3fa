//! Interface state that captures share, counted: merging receive offloads
//! turned off (`--fix-offloads`) and hardware timestamping turned on are
//! taken by the first capture of the process that needs them and restored
//! when the last one ends. Promiscuous mode needs nothing here: the kernel
//! counts it per socket (`PACKET_ADD_MEMBERSHIP`) and drops it with the last.

use crate::error::EngineError;
use crate::event::Event;
use ringcap_source::netdev::{self, ActiveFeature};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

#[derive(Default)]
struct Shared {
    /// Captures holding offloads off, and what to turn back on after them.
    offloads_off: usize,
    restore_offloads: Vec<ActiveFeature>,
    /// Captures using hardware timestamps, and the configuration before them.
    hw_timestamps: usize,
    restore_hw: Option<libc::hwtstamp_config>,
}

static REGISTRY: Mutex<Option<HashMap<String, Shared>>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<HashMap<String, Shared>>> {
    // A panic elsewhere while holding the lock leaves plain counts behind:
    // still consistent enough to go on with.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one capture holds on one interface; given back on drop.
#[derive(Debug)]
pub struct Lease {
    interface: String,
    offloads: bool,
    hw_timestamps: bool,
    /// Where to say what was restored.
    events: Option<crossbeam_channel::Sender<Event>>,
}

/// A short, actionable description of merging offloads that are on.
fn offload_names(on: &[ActiveFeature]) -> (String, String) {
    let long: Vec<&str> = on.iter().map(|f| f.names.long).collect();
    let args: String = on
        .iter()
        .map(|f| format!(" {} off", f.names.short))
        .collect();
    (long.join(", "), args)
}

impl Lease {
    /// Takes what a capture on `interface` needs: offloads off if `fix_offloads`
    /// (else a warning event when they merge packets), hardware timestamps if
    /// `hw_timestamps`.
    pub fn acquire(
        interface: &str,
        fix_offloads: bool,
        hw_timestamps: bool,
        events: &crossbeam_channel::Sender<Event>,
    ) -> Result<Lease, EngineError> {
        // Each step takes the registry lock on its own; if a later step
        // fails, dropping the lease gives back what the earlier ones took.
        let mut lease = Lease {
            interface: interface.to_string(),
            offloads: false,
            hw_timestamps: false,
            events: Some(events.clone()),
        };
        if hw_timestamps {
            take_hw_timestamps(interface)?;
            lease.hw_timestamps = true;
        }
        lease.offloads = take_offloads(interface, fix_offloads, events)?;
        Ok(lease)
    }

    /// Gives back without telling anyone (the capture's event stream is gone).
    pub fn quiet(mut self) {
        self.events = None;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut reg = registry();
        let Some(state) = reg.as_mut().and_then(|m| m.get_mut(&self.interface)) else {
            return;
        };
        let say = |e: Event| {
            if let Some(tx) = &self.events {
                let _ = tx.send(e);
            }
        };
        if self.offloads {
            state.offloads_off = state.offloads_off.saturating_sub(1);
            if state.offloads_off == 0 && !state.restore_offloads.is_empty() {
                let features = std::mem::take(&mut state.restore_offloads);
                let bits: Vec<u32> = features.iter().map(|f| f.bit).collect();
                let (names, args) = offload_names(&features);
                match netdev::set_features(&self.interface, &bits, true) {
                    Ok(()) => say(Event::Notice(format!(
                        "restored {names} on {}",
                        self.interface
                    ))),
                    Err(e) => say(Event::Warning(format!(
                        "could not restore {names} on {} ({e}): run ethtool -K {}{}",
                        self.interface,
                        self.interface,
                        args.replace(" off", " on")
                    ))),
                }
            }
        }
        if self.hw_timestamps {
            state.hw_timestamps = state.hw_timestamps.saturating_sub(1);
            if state.hw_timestamps == 0 {
                if let Some(before) = state.restore_hw.take() {
                    if let Err(e) = netdev::set_hw_timestamping(&self.interface, before) {
                        say(Event::Warning(format!(
                            "could not restore the hardware timestamping of {}: {e}",
                            self.interface
                        )));
                    }
                }
            }
        }
    }
}

/// Turns offloads off on `interface` for one more capture (true), or warns
/// that they merge packets (false).
fn take_offloads(
    interface: &str,
    fix_offloads: bool,
    events: &crossbeam_channel::Sender<Event>,
) -> Result<bool, EngineError> {
    let mut reg = registry();
    let state = reg
        .get_or_insert_with(HashMap::new)
        .entry(interface.to_string())
        .or_default();
    if fix_offloads && state.offloads_off > 0 {
        state.offloads_off += 1;
        return Ok(true);
    }
    // Reading features needs no privilege; a failure only means the
    // interface has none to speak of (or is gone, which binding says).
    let on = netdev::merging_offloads(interface).unwrap_or_default();
    if on.is_empty() {
        return Ok(false);
    }
    let (names, args) = offload_names(&on);
    if !fix_offloads {
        let _ = events.send(Event::Advice(crate::Reason::MergingOffloads {
            interface: interface.to_string(),
            names: names.clone(),
            ethtool_args: args.clone(),
        }));
        return Ok(false);
    }
    let bits: Vec<u32> = on.iter().filter(|f| f.changeable).map(|f| f.bit).collect();
    netdev::set_features(interface, &bits, false).map_err(|e| {
        let msg = format!(
            "could not turn off {names} on {interface} ({e}); as root: ethtool -K {interface}{args}"
        );
        if e.raw_os_error() == Some(libc::EPERM) {
            EngineError::system(format!("{msg} (needs CAP_NET_ADMIN)"))
        } else {
            EngineError::system(msg)
        }
    })?;
    let _ = events.send(Event::Notice(format!(
        "turned off {names} on {interface} for the capture (restored when it ends)"
    )));
    state.restore_offloads = on.into_iter().filter(|f| f.changeable).collect();
    state.offloads_off = 1;
    Ok(true)
}

/// Turns hardware timestamping on for one more capture.
fn take_hw_timestamps(interface: &str) -> Result<(), EngineError> {
    let mut reg = registry();
    let state = reg
        .get_or_insert_with(HashMap::new)
        .entry(interface.to_string())
        .or_default();
    if state.hw_timestamps == 0 {
        let before = netdev::hw_timestamping(interface).ok();
        netdev::set_hw_timestamping(interface, netdev::HW_TIMESTAMP_ALL).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EPERM) => EngineError::system(format!(
                    "enabling hardware timestamps on {interface} needs CAP_NET_ADMIN"
                )),
                _ => EngineError::system(
                    ringcap_source::OpenError::NoHardwareTimestamps {
                        interface: interface.to_string(),
                        error: e,
                    }
                    .to_string(),
                ),
            }
        })?;
        state.restore_hw = before;
    }
    state.hw_timestamps += 1;
    Ok(())
}

/// Captures currently holding offloads off on `interface` (for tests and status).
pub fn offload_holders(interface: &str) -> usize {
    registry()
        .as_ref()
        .and_then(|m| m.get(interface))
        .map(|s| s.offloads_off)
        .unwrap_or(0)
}
