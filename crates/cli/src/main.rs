//! The `tapdeck` binary: parses flags and wires the libraries together, nothing more.

mod args;
mod backfill;
mod collect;
mod convert;
mod exit;
mod export;
mod extract;
mod info;
mod logging;
mod merge;
mod query;
mod record;
mod serve;
mod status;
mod verify;
mod wording;

use clap::{ArgMatches, FromArgMatches};

use args::{Cli, Command};

// The converter allocates per decoded message (attributes, names, rows); glibc's malloc spent a
// fifth of its decode thread consolidating and splitting chunks. mimalloc's size-class pages
// and thread-local free lists make those allocations cheap; the capture path allocates nothing
// per packet, so it is unaffected.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let matches = args::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // serve sets its logger up from its config file (format and level).
    if !matches!(cli.command, Command::Serve(_)) {
        let _ = logging::init(&cli.log, false);
    }
    quiet_on_closed_stdout();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cli, &matches)))
        .unwrap_or_else(|panic| {
            if is_closed_stdout(panic.as_ref()) {
                // `tapdeck info S | head -1`: the reader has what it wanted.
                std::process::exit(0);
            }
            std::panic::resume_unwind(panic)
        });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // One line: what is wrong, and (in the message) what to do about it.
            eprintln!("tapdeck: {e:#}");
            std::process::exit(exit::code_of(&e));
        }
    }
}

fn run(cli: &Cli, matches: &ArgMatches) -> anyhow::Result<i32> {
    match &cli.command {
        Command::Serve(a) => {
            let sub = matches.subcommand_matches("serve").unwrap_or(matches);
            serve::run(a, sub)
        }
        Command::Status(a) => status::run(a),
        Command::Query(a) => query::run(a),
        Command::Record(a) => record::run(a),
        Command::Export(a) => export::run(a),
        Command::Collect(a) => collect::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Index(a) => backfill::run(a),
        Command::Extract(a) => extract::run(a),
        Command::Info(a) => info::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Decrypt(a) => convert::decrypt(a),
        Command::Keygen(a) => convert::keygen(a),
        Command::Analyze(a) => convert::analyze(a),
    }
}

/// `println!` panics when standard output is a pipe whose reader has gone (Rust ignores
/// SIGPIPE, so the write fails with EPIPE). For every subcommand that is the reader saying
/// it has enough, not an error: the panic hook stays silent for it and `main` exits 0.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(info.payload()) {
            default(info);
        }
    }));
}

fn is_closed_stdout(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    message.starts_with("failed printing to stdout") && message.contains("Broken pipe")
}
