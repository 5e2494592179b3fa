//! `ringcap capture --flows URL`: flow records from the capture, exported
//! by `ringcap-flow` while packets are written (or not: `-w` is optional).
//!
//! The flow stage runs in the engine's observer slot of every capture
//! thread; the exporter thread is started here before the capture (its
//! sockets and files opened while privileges are still held) and finished
//! after it, so that every flow still open at the end is exported.

use crate::failure::Failure;
use clap::Args;
use ringcap_engine::CaptureSpec;
use ringcap_engine::{SampleMode, Sampling};
use ringcap_flow::{ExportOptions, Exporter, FlowStage, SamplingReport, TableConfig, Target};

/// Flow options of `ringcap capture`.
#[derive(Debug, Args, Clone, Default)]
pub struct FlowArgs {
    /// Export flow records to URL: ipfix://HOST:PORT (IPFIX over UDP), ipfix+tcp://HOST:PORT (IPFIX over TCP), netflow9://HOST:PORT (NetFlow v9 over UDP), kafka://BROKER[,BROKER...]/TOPIC (one JSON message per flow; ?format=protobuf: goflow2's protobuf FlowMessage, one per direction) or json:PATH (json:- for standard output). May be given more than once; -w is then optional.
    #[arg(long = "flows", value_name = "URL", help_heading = "Flows")]
    pub flows: Vec<String>,

    /// The IPFIX observation domain (NetFlow v9: source ID) of the records [default: this process's id, so that two exporters on one host are two exporters to a collector such as nfcapd, which tells them apart by it].
    #[arg(long, value_name = "N", help_heading = "Flows")]
    pub flows_domain: Option<u32>,

    /// A flow is exported, and counted anew, after this long [default: 1800].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECS",
        help_heading = "Flows"
    )]
    pub active_timeout: Option<f64>,

    /// A flow without packets for this long is exported [default: 15].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECS",
        help_heading = "Flows"
    )]
    pub idle_timeout: Option<f64>,

    /// Flows held per capture thread; when full, the one idle longest is exported early (counted) [default: 262144; through ringcapd: 16384 per session, within the grant's max_flows].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "N",
        help_heading = "Flows"
    )]
    pub max_flows: Option<u32>,

    /// UDP targets (ipfix://, netflow9://): send at most this many MB (10^6 bytes) of datagrams a second. A UDP exporter cannot see a collector's drops; a burst (a file's last flows, many flows idling out at once) can outrun a local collector's socket buffer, and pacing keeps it within what the collector reads (80 MB/s is ~1.1 M IPFIX records a second) [default: unpaced].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "MB_PER_S",
        help_heading = "Flows"
    )]
    pub flows_pace: Option<f64>,
}

/// `--flows-pace` in bytes a second (`None`: unpaced); a bad value is
/// refused.
pub fn pace(a: &FlowArgs) -> Result<Option<u64>, Failure> {
    match a.flows_pace {
        None => Ok(None),
        Some(m) if m.is_finite() && (0.001..=100_000.0).contains(&m) => Ok(Some((m * 1e6) as u64)),
        Some(m) => Err(Failure::usage(format!(
            "--flows-pace {m} must be from 0.001 to 100000 MB a second"
        ))),
    }
}

/// Default active timeout, s.
pub const ACTIVE_TIMEOUT: f64 = 1800.0;
/// Default idle timeout, s.
pub const IDLE_TIMEOUT: f64 = 15.0;
/// Default flows per capture thread (~35 MiB of table each).
pub const MAX_FLOWS: u32 = 262_144;

/// The flow table settings and targets `a` asks for; `None` without
/// `--flows`. Bad values are refused with a message.
pub fn plan(a: &FlowArgs) -> Result<Option<(TableConfig, Vec<Target>)>, Failure> {
    if a.flows.is_empty() {
        if a.active_timeout.is_some()
            || a.idle_timeout.is_some()
            || a.max_flows.is_some()
            || a.flows_pace.is_some()
        {
            return Err(Failure::usage(
                "--active-timeout, --idle-timeout, --max-flows and --flows-pace need --flows URL",
            ));
        }
        return Ok(None);
    }
    let targets = a
        .flows
        .iter()
        .map(|u| Target::parse(u))
        .collect::<Result<Vec<_>, _>>()
        .map_err(flag)?;
    if targets
        .iter()
        .filter(|t| matches!(t, Target::Json(p) if p == "-"))
        .count()
        > 1
    {
        return Err(Failure::usage("--flows json:- can be given once"));
    }
    let ns = |name: &str, v: f64| -> Result<u64, Failure> {
        if v > 0.0 && v.is_finite() && v <= 31_536_000.0 {
            Ok((v * 1e9) as u64)
        } else {
            Err(Failure::usage(format!(
                "{name} {v} must be a positive number of seconds (at most a year)"
            )))
        }
    };
    let max_flows = a.max_flows.unwrap_or(MAX_FLOWS);
    if !(1..=(1 << 28)).contains(&max_flows) {
        return Err(Failure::usage(format!(
            "--max-flows {max_flows} must be from 1 to {}",
            1u32 << 28
        )));
    }
    pace(a)?;
    let cfg = TableConfig {
        active_ns: ns(
            "--active-timeout",
            a.active_timeout.unwrap_or(ACTIVE_TIMEOUT),
        )?,
        idle_ns: ns("--idle-timeout", a.idle_timeout.unwrap_or(IDLE_TIMEOUT))?,
        max_flows,
    };
    Ok(Some((cfg, targets)))
}

/// The flow crate's message (which begins with the URL) as the CLI says it.
fn flag(e: String) -> Failure {
    Failure::usage(format!("--flows {e}"))
}

/// Starts the exporter for `a` and puts the flow stage into `spec`; `None`
/// without `--flows`.
pub fn start(a: &FlowArgs, spec: &mut CaptureSpec) -> Result<Option<Exporter>, Failure> {
    let Some((cfg, targets)) = plan(a)? else {
        return Ok(None);
    };
    let json_stdout = targets
        .iter()
        .any(|t| matches!(t, Target::Json(p) if p == "-"));
    if json_stdout && spec.sink.output == ringcap_engine::OutputPlan::Stdout {
        return Err(Failure::usage(
            "--flows json:- and -w - would both write to standard output: give one a file",
        ));
    }
    let opts = ExportOptions {
        sampling: sampling_report(&spec.sampling),
        pace_bytes_per_s: pace(a)?,
        domain: domain(a),
        ..ExportOptions::default()
    };
    let exporter = Exporter::start(&targets, opts).map_err(flag)?;
    spec.observer = Some(FlowStage::factory(cfg, exporter.sender()));
    Ok(Some(exporter))
}

/// The observation domain: `--flows-domain`, else this process's id (two
/// exporters on one host with one domain are one exporter to nfcapd, and
/// their sequence numbers look like losses).
pub fn domain(a: &FlowArgs) -> u32 {
    a.flows_domain.unwrap_or_else(std::process::id)
}

/// The sampling in front of the flow table, as IPFIX and NetFlow v9 report it.
pub fn sampling_report(s: &Sampling) -> Option<SamplingReport> {
    match *s {
        Sampling::All => None,
        Sampling::Packets {
            n,
            mode: SampleMode::Count,
        } => Some(SamplingReport::count(n)),
        Sampling::Packets {
            n,
            mode: SampleMode::Random,
        } => Some(SamplingReport::random(n)),
        Sampling::Flows { n } => Some(SamplingReport::flows(n)),
    }
}

/// Adds `"flows":{...}` (the flow stage's counters) to a JSON record.
pub fn add_json(line: &mut String, s: &ringcap_flow::FlowStats) {
    if line.ends_with('}') {
        line.pop();
        line.push_str(",\"flows\":{");
        line.push_str(&s.json_fields());
        line.push_str("}}");
    }
}

/// Exports what is left (after the capture has ended) and reports.
/// Ends the export and says what it did; true when it did not deliver
/// everything (then said why, and the capture's exit status is 1, as for
/// packets that could not be written).
pub fn finish(exporter: Option<Exporter>) -> bool {
    let Some(e) = exporter else {
        return false;
    };
    let stats = e.finish();
    eprintln!("ringcap: {}", stats.summary());
    match stats.failure() {
        Some(why) => {
            eprintln!("ringcap: error: {why}");
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcap_flow::KafkaFormat;

    fn args(flows: &[&str]) -> FlowArgs {
        FlowArgs {
            flows: flows.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn urls_are_checked() {
        assert!(plan(&args(&[])).unwrap().is_none());
        let (_, t) = plan(&args(&["ipfix://127.0.0.1:4739", "json:-"]))
            .unwrap()
            .unwrap();
        assert_eq!(t.len(), 2);
        let (_, t) = plan(&args(&["ipfix+tcp://127.0.0.1:4739"]))
            .unwrap()
            .unwrap();
        assert_eq!(t, vec![Target::IpfixTcp("127.0.0.1:4739".into())]);
        for bad in [
            "kafka://b/t",
            "kafka://h:1/",
            "kafka://h:1/a b",
            "kafka://h:1,h/t",
            "kafka://h:1/t?format=avro",
            "kafka://h:1/t?x=1",
            "ipfix+tcp://h",
            "ipfix://h",
            "ipfix://h:0",
            "sflow://h:1",
            "json:",
        ] {
            let e = plan(&args(&[bad])).unwrap_err();
            assert!(e.message.contains("--flows"), "{bad}: {}", e.message);
        }
        let k = plan(&args(&["kafka://127.0.0.1:9092,[::1]:9092/flows"]));
        if cfg!(feature = "kafka") {
            let (_, t) = k.unwrap().unwrap();
            assert_eq!(
                t,
                vec![Target::Kafka {
                    brokers: "127.0.0.1:9092,[::1]:9092".into(),
                    topic: "flows".into(),
                    format: KafkaFormat::Json,
                }]
            );
            let (_, t) = plan(&args(&["kafka://h:1/f?format=protobuf"]))
                .unwrap()
                .unwrap();
            assert!(
                matches!(&t[0], Target::Kafka { topic, format: KafkaFormat::Protobuf, .. } if topic == "f"),
                "{t:?}"
            );
        } else {
            assert!(k.unwrap_err().message.contains("not built"));
        }
    }

    #[test]
    fn timeouts_need_flows_and_sense() {
        let mut a = args(&[]);
        a.idle_timeout = Some(3.0);
        assert!(plan(&a).is_err());
        let mut a = args(&["json:-"]);
        a.idle_timeout = Some(0.0);
        assert!(plan(&a).is_err());
        a.idle_timeout = Some(2.5);
        let (cfg, _) = plan(&a).unwrap().unwrap();
        assert_eq!(cfg.idle_ns, 2_500_000_000);
        assert_eq!(cfg.active_ns, 1_800_000_000_000);
    }

    #[test]
    fn pace_needs_flows_and_sense() {
        let mut a = args(&[]);
        a.flows_pace = Some(80.0);
        assert!(plan(&a).is_err());
        let mut a = args(&["ipfix://127.0.0.1:4739"]);
        for bad in [0.0, -1.0, f64::NAN, 1e9] {
            a.flows_pace = Some(bad);
            assert!(plan(&a).is_err(), "{bad}");
        }
        a.flows_pace = Some(80.0);
        assert!(plan(&a).is_ok());
        assert_eq!(pace(&a).unwrap(), Some(80_000_000));
    }
}
