//! ringcap: high-speed passive packet capture for Linux.

use clap::Parser;
use ringcap::cli::{Cli, Command};
use ringcap::failure::exit;

fn main() {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let result = match cli.command {
        Command::Capture(args) => ringcap::session::capture(&args, command_line),
        Command::Repair(args) => ringcap::demo::repair(&args),
        Command::Index(args) => ringcap::query::index(&args),
        Command::Query(args) => ringcap::query::query(&args),
        Command::Serve(args) => ringcap::serve::serve(&args),
        Command::ServeKeys(args) => ringcap::serve::serve_keys(&args),
        Command::AnonymizeKey(args) => ringcap::privacy::anonymize_key(&args),
        Command::Inject(args) => ringcap::inject::run(&args),
        Command::Stats(args) => ringcap::daemon_client::stats(&args),
        Command::Dumps(args) => ringcap::daemon_client::dumps(&args),
        Command::Run(args) => ringcap::run::run(&args),
        Command::BenchSink(args) => ringcap::benchsink::run(&args),
        Command::Demo(args) => ringcap::demo::demo(&args),
        Command::DemoSend { interface, count } => ringcap::demo::send(&interface, count),
        Command::Extcap { args } => ringcap::extcap::run(&args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(f) => {
            eprintln!("ringcap: {}", f.message);
            std::process::exit(f.code);
        }
    }
}
