//! The `hull` command: parses arguments, hands work to hull-box, prints results and errors once.

use clap::{Parser, Subcommand};
use hull_cli::{bench, doctor, images, mcp, pull, run, serve};

/// A local sandbox for code nobody has read yet: every call gets a fresh, kernel-enforced box.
#[derive(Parser)]
#[command(name = "hull", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one command (or --code) in a fresh box, then throw the box away.
    Run(Box<run::RunArgs>),
    /// Check this host: namespaces, cgroups, seccomp, landlock, overlayfs; say how to fix gaps.
    Doctor(doctor::DoctorArgs),
    /// Measure box overhead against bare fork+exec, interleaved in one process.
    Bench(bench::BenchArgs),
    /// Import an OCI image layout, OCI archive or docker archive into the local store.
    Import(images::ImportArgs),
    /// Pull an image from a registry (distribution v2) into the local store.
    Pull(pull::PullArgs),
    /// List the images in the local store.
    Images(images::ImagesArgs),
    /// Remove images from the local store.
    Rmi(images::RmiArgs),
    /// Speak the JSON-lines protocol on stdin/stdout (what the language bindings use).
    Serve(serve::ServeArgs),
    Mcp(mcp::McpArgs),
}

fn main() {
    hull_box::trace::step("main: entered");
    let cli = Cli::parse();
    hull_box::trace::step("main: arguments parsed");
    let code = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Doctor(args) => doctor::main(&args),
        Command::Bench(args) => bench::main(&args),
        Command::Serve(args) => serve::main(&args),
        Command::Import(args) => images::import(&args),
        Command::Pull(args) => pull::main(&args),
        Command::Images(args) => images::images(&args),
        Command::Rmi(args) => images::rmi(&args),
        Command::Mcp(args) => mcp::main(&args),
    };
    std::process::exit(code);
}
