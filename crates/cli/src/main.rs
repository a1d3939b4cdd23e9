//! The `tapdeck` binary: parses flags and wires the libraries together, nothing more.

mod args;
mod collect;
mod convert;
mod export;
mod extract;
mod info;
mod merge;
mod record;
mod verify;

use clap::Parser;

use args::{Cli, Command};

// The converter allocates per decoded message (attributes, names, rows); glibc's malloc spent a
// fifth of its decode thread consolidating and splitting chunks. mimalloc's size-class pages
// and thread-local free lists make those allocations cheap; the capture path allocates nothing
// per packet, so it is unaffected.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let result = match &cli.command {
        Command::Record(a) => record::run(a),
        Command::Export(a) => export::run(a),
        Command::Collect(a) => collect::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Extract(a) => extract::run(a),
        Command::Info(a) => info::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Decrypt(a) => convert::decrypt(a),
        Command::Keygen(a) => convert::keygen(a),
        Command::Analyze(a) => convert::analyze(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line: what is wrong, and (in the message) what to do about it.
            eprintln!("tapdeck: {e:#}");
            std::process::exit(1);
        }
    }
}
