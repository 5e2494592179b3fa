//! `ringcap capture --daemon -i IF --flows URL [-w …]`: flow records made
//! by ringcapd under the user's grant (its masks and anonymization applied
//! before its flow table saw the packets), read from the session's ring and
//! exported here, with the same exporters as a local capture. The daemon
//! never sends anything to a network address a client names: the export is
//! this process's own, with this user's rights.
//!
//! Without `-w` the session asks for flow records only (no packet reaches
//! this process: what a `packets = false` grant allows); with `-w`, packets
//! and flow records both.

use crate::failure::Failure;
use crate::flows::FlowArgs;
use ringcap_client::{FlowEntry, FlowRequest, Session};
use ringcap_flow::{
    Direction, EndReason, ExportOptions, Exporter, FlowKey, FlowRecord, FlowSender, Tunnel,
};

/// Default flow table asked of the daemon (the grant may give fewer, and
/// says so): a quarter of a grant's default `max_flows` for the user, so
/// that a user can run a few flow sessions at once without asking for less;
/// a table sized to its flows is also cheaper per packet than a sparse one
/// (`crates/daemon/examples/hub_speed.rs`).
pub const DAEMON_MAX_FLOWS: u32 = 16_384;

/// The flow part of an `Open` for `a` (`None` without `--flows`): timeouts
/// in whole seconds (rounded up), packets too when they are written (to
/// `output`, the `-w` plan).
pub fn request(
    a: &FlowArgs,
    output: &ringcap_engine::OutputPlan,
) -> Result<Option<FlowRequest>, Failure> {
    let Some((cfg, targets)) = crate::flows::plan(a)? else {
        return Ok(None);
    };
    let packets = *output != ringcap_engine::OutputPlan::Discard;
    if *output == ringcap_engine::OutputPlan::Stdout
        && targets
            .iter()
            .any(|t| matches!(t, ringcap_flow::Target::Json(p) if p == "-"))
    {
        return Err(Failure::usage(
            "--flows json:- and -w - would both write to standard output: give one a file",
        ));
    }
    let secs = |name: &str, ns: u64| -> Result<u32, Failure> {
        let s = ns.div_ceil(1_000_000_000);
        let limits = ringcap_proto::flows::FLOW_TIMEOUT_S;
        u32::try_from(s)
            .ok()
            .filter(|s| limits.contains(s))
            .ok_or_else(|| {
                Failure::usage(format!(
                    "{name}: ringcapd takes {} to {} s",
                    limits.start(),
                    limits.end()
                ))
            })
    };
    let max_flows = a.max_flows.unwrap_or(DAEMON_MAX_FLOWS);
    if !ringcap_proto::flows::FLOW_TABLE.contains(&max_flows) {
        return Err(Failure::usage(format!(
            "--max-flows {max_flows}: ringcapd takes 1 to {}",
            ringcap_proto::flows::FLOW_TABLE.end()
        )));
    }
    Ok(Some(FlowRequest {
        active_timeout_s: secs("--active-timeout", cfg.active_ns)?,
        idle_timeout_s: secs("--idle-timeout", cfg.idle_ns)?,
        max_flows,
        packets,
    }))
}

/// The exporter of a daemon session's flow records.
pub struct DaemonFlows {
    exporter: Exporter,
    sender: FlowSender,
}

impl DaemonFlows {
    /// Starts the exporter for `a`'s targets (`None` without `--flows`), with
    /// the sampling the daemon put in front of its table.
    pub fn start(a: &FlowArgs, session: &Session) -> Result<Option<DaemonFlows>, Failure> {
        let Some((_, targets)) = crate::flows::plan(a)? else {
            return Ok(None);
        };
        let Some(f) = session.effective.flows else {
            return Err(Failure::runtime(
                "ringcapd accepted the session without flow records",
            ));
        };
        let sampling = match session.effective.sample {
            None => ringcap_engine::Sampling::All,
            Some(ringcap_client::Sample::Packets(n)) => ringcap_engine::Sampling::Packets {
                n,
                mode: ringcap_engine::SampleMode::Random,
            },
            Some(ringcap_client::Sample::Flows(n)) => ringcap_engine::Sampling::Flows { n },
        };
        let opts = ExportOptions {
            sampling: crate::flows::sampling_report(&sampling),
            pace_bytes_per_s: crate::flows::pace(a)?,
            domain: crate::flows::domain(a),
            ..ExportOptions::default()
        };
        let exporter = Exporter::start(&targets, opts).map_err(Failure::usage)?;
        eprintln!(
            "flow records through ringcapd: active timeout {} s, idle timeout {} s, table of {} flows{}",
            f.active_timeout_s,
            f.idle_timeout_s,
            f.max_flows,
            if f.packets { "" } else { ", no packets" }
        );
        Ok(Some(DaemonFlows {
            sender: exporter.sender(),
            exporter,
        }))
    }

    /// Exports every flow record the session has delivered so far (read
    /// packets first: their chunks share the ring).
    pub fn pump(&self, session: &mut Session) -> Result<u64, Failure> {
        session
            .flows(|e| self.sender.send(record(e), true))
            .map_err(crate::failure::refusal)
    }

    /// Exports the rest and reports, with the daemon's final counters `c`;
    /// true when the export did not deliver everything (said).
    pub fn finish(
        self,
        session: &mut Session,
        c: &ringcap_client::SessionCounters,
    ) -> Result<bool, Failure> {
        self.pump(session)?;
        eprintln!(
            "ringcap: ringcapd made {} flow records ({} exported early: table full, {} lost: ring full){}",
            c.flows_delivered + c.flows_dropped_client,
            c.flows_evicted,
            c.flows_dropped_client,
            if c.packets_to_flows > 0 {
                format!(", {} packets taken into flow records", c.packets_to_flows)
            } else {
                String::new()
            }
        );
        if session.flows_lost() > 0 {
            eprintln!(
                "ringcap: {} flow records were let go unread",
                session.flows_lost()
            );
        }
        drop(self.sender);
        Ok(crate::flows::finish(Some(self.exporter)))
    }
}

/// A daemon flow record as the exporters take it (the tunnel's outer
/// addresses are not sent by the daemon: zero).
pub fn record(e: &FlowEntry) -> FlowRecord {
    let reason = match e.reason {
        1 => EndReason::IdleTimeout,
        2 => EndReason::ActiveTimeout,
        3 => EndReason::EndOfFlow,
        5 => EndReason::LackOfResources,
        _ => EndReason::ForcedEnd,
    };
    FlowRecord {
        key: FlowKey {
            src: e.src,
            dst: e.dst,
            sport: e.sport,
            dport: e.dport,
            proto: e.proto,
            v6: e.v6,
            vlan: e.vlan,
            icmp: e.icmp,
            tunnel: Tunnel {
                kind: e.tunnel_kind,
                id: e.tunnel_id,
                ..ringcap_flow::NO_TUNNEL
            },
        },
        start_ns: e.start_ns,
        end_ns: e.end_ns,
        fwd: Direction {
            packets: e.packets,
            octets: e.octets,
            tcp_flags: e.tcp_flags,
        },
        rev: Direction {
            packets: e.rev_packets,
            octets: e.rev_octets,
            tcp_flags: e.rev_tcp_flags,
        },
        icmp: e.icmp,
        reason,
    }
}
