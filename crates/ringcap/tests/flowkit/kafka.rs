//! A single-node Apache Kafka (broker and KRaft controller in one JVM) on
//! 127.0.0.1, from the Maven Central jars `scripts/setup-kafka` fetches,
//! with its own ports and data directory; stopped when dropped.

use ringcap_testkit::capture::ChildGuard;
use ringcap_testkit::TempDir;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VERSION: &str = "4.1.1";

/// The jars, or why there are none.
fn jars() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("RINGCAP_KAFKA_JARS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/kafka-jars"),
    };
    if dir.join(format!(".complete-{VERSION}")).exists() {
        Ok(dir)
    } else {
        Err(format!(
            "no Kafka {VERSION} jars in {} (scripts/setup-kafka fetches them)",
            dir.display()
        ))
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running broker.
pub struct Broker {
    child: ChildGuard,
    pub port: u16,
    dir: TempDir,
}

impl Broker {
    /// Starts a broker and waits until kcat sees it; `Err(reason)` when
    /// this machine cannot run one (no jars, java or kcat).
    pub fn start() -> Result<Broker, String> {
        let jars = jars()?;
        for t in ["java", "kcat"] {
            if !have(t) {
                return Err(format!("{t} is not installed (scripts/setup installs it)"));
            }
        }
        let dir = TempDir::new("kafka");
        let (port, cport) = (free_port(), free_port());
        let data = dir.join("data");
        let props = dir.join("server.properties");
        std::fs::write(
            &props,
            format!(
                "process.roles=broker,controller\n\
node.id=1\n\
controller.quorum.voters=1@127.0.0.1:{cport}\n\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n\
advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
controller.listener.names=CONTROLLER\n\
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
inter.broker.listener.name=PLAINTEXT\n\
log.dirs={}\n\
num.partitions=1\n\
auto.create.topics.enable=true\n\
offsets.topic.replication.factor=1\n\
transaction.state.log.replication.factor=1\n\
transaction.state.log.min.isr=1\n\
group.initial.rebalance.delay.ms=0\n",
                data.display()
            ),
        )
        .unwrap();
        let cp = format!("{}/*", jars.display());
        let java = |class: &str| {
            let mut c = Command::new("java");
            c.args(["-Xmx512m", "-XX:+UseSerialGC", "-cp", &cp, class]);
            c
        };
        let out = java("kafka.tools.StorageTool")
            .args(["format", "-t", "MkU3OEVBNTcwNTJENDM2Qk", "-c"])
            .arg(&props)
            .output()
            .map_err(|e| format!("java: {e}"))?;
        assert!(
            out.status.success(),
            "kafka storage format: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let log = std::fs::File::create(dir.join("broker.log")).unwrap();
        let mut cmd = java("kafka.Kafka");
        cmd.arg(&props)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        let child = ChildGuard::spawn(&mut cmd)
            .expect("start kafka")
            .with_term_timeout(Duration::from_secs(15));
        let mut b = Broker { child, port, dir };
        let t = Instant::now();
        loop {
            let ok = Command::new("kcat")
                .args(["-b", &b.addr(), "-L", "-m", "2"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(b);
            }
            if let Ok(Some(st)) = b.child.wait_timeout(Duration::ZERO) {
                panic!("kafka exited {st:?}:\n{}", b.log());
            }
            assert!(
                t.elapsed() < Duration::from_secs(90),
                "kafka not ready in 90 s:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// HOST:PORT of the broker.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's output.
    pub fn log(&self) -> String {
        let t = std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Every message of `topic` from the beginning, by kcat (one per line).
    pub fn consume(&self, topic: &str) -> Vec<String> {
        let out = Command::new("kcat")
            .args([
                "-C",
                "-b",
                &self.addr(),
                "-t",
                topic,
                "-o",
                "beginning",
                "-e",
                "-q",
            ])
            .args(["-f", "%s\\n"])
            .output()
            .expect("kcat");
        assert!(
            out.status.success(),
            "kcat: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Broker {
    /// Every message of `topic` from the beginning, by kcat, as bytes
    /// (each one framed by kcat's `%R`: its length, 32-bit big endian).
    pub fn consume_raw(&self, topic: &str) -> Vec<Vec<u8>> {
        let out = Command::new("kcat")
            .args(["-C", "-b", &self.addr(), "-t", topic])
            .args(["-o", "beginning", "-e", "-q", "-f", "%R%s"])
            .output()
            .expect("kcat");
        assert!(
            out.status.success(),
            "kcat: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut b = &out.stdout[..];
        let mut msgs = Vec::new();
        while b.len() >= 4 {
            let n = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let n = usize::try_from(n).expect("a message with a payload");
            msgs.push(b[4..4 + n].to_vec());
            b = &b[4 + n..];
        }
        assert!(b.is_empty(), "kcat output cut: {} bytes left", b.len());
        msgs
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.terminate();
    }
}
