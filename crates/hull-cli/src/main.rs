//! The `hull` command: parses arguments, hands work to hull-box, prints results and errors once.

use clap::{Parser, Subcommand};
use hull_cli::verbosity::Verbosity;
use hull_cli::{bench, ca, doctor, images, mcp, named, pull, run, serve};

/// A local sandbox for code nobody has read yet: every call gets a fresh, kernel-enforced box.
/// The environment variables hull reads, for `--help` and the man page.
const ENVIRONMENT: &str = "Environment:
  HULL_HOME             the image store and CA (default ~/.local/share/hull)
  HULL_SANDBOXES        named sandboxes' state (default /var/lib/hull/sandboxes as root, else ~/.local/state/hull/sandboxes)
  HULL_CGROUP_PARENT    the cgroup boxes are made under (a delegated subtree for rootless caps)
  HULL_OVERLAY          named sandboxes' writable root: kernel or fuse (default: kernel where it works)
  HULL_LOG_CAP          bytes of one named sandbox's exec log file (default 8 MiB)
  HULL_NET_DNS          name servers the gateway network resolves through (ADDRESS:PORT,...)
  HULL_NET_UPSTREAM_CA  extra CA bundle a brokering gateway trusts upstream
  HULL_LOG              what hull says besides errors: error, warn (default), info, debug (-q, -v, -vv)
  HULL_TRACE_STEPS=1    print the one-shot path's steps with times at exit
  HULL_TRACE_CALLS=1    print each serve call's steps with times
  HULL_MCP_*            hull mcp's settings (hull mcp --help)
  HULL_BIN              the hull the SDKs run (theirs, not hull's)";

#[derive(Parser)]
#[command(name = "hull", version, about, long_about = None, propagate_version = true, after_help = ENVIRONMENT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    verbosity: Verbosity,
    /// Say more (as --verbose), given before the subcommand: `hull -v pull IMAGE`.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    v: u8,
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
    /// Create a named sandbox that lives on (its own disk, a keeper process) and start it.
    Create(Box<named::CreateArgs>),
    /// Run a command in a named sandbox (starting it if stopped), streaming its output.
    Exec(named::ExecArgs),
    /// Stop a named sandbox: end every process in it, keep its disk.
    Stop(named::NameArgs),
    /// Start a stopped named sandbox with the same configuration and disk.
    Start(named::NameArgs),
    /// Remove a named sandbox, running or stopped (nothing to do if there is none).
    Rm(named::NameArgs),
    /// List named sandboxes: state, image, age, size on disk.
    Ps(named::PsArgs),
    /// Print what every command run in a named sandbox printed.
    Logs(named::LogsArgs),
    /// Save, list and remove templates: frozen sandboxes that new ones start from.
    Template(named::TemplateArgs),
    /// The gateway CA brokered boxes trust: rotate it, print its path.
    Ca(ca::CaArgs),
    /// A named sandbox's keeper (started by create, start and exec; not for people).
    #[command(name = "__keeper", hide = true)]
    Keeper(named::KeeperArgs),
    /// One file operation of a named sandbox as its user (run by the keeper; not for people).
    #[command(name = "__files", hide = true)]
    Files(named::files_ns::FilesArgs),
    /// A box's network gateway (started by the box's supervisor; not for people).
    #[command(name = "__net", hide = true)]
    Net,
    /// Print a shell completion script: `hull completions bash > /etc/bash_completion.d/hull`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print hull's man page (roff): `hull man | man -l -`.
    Man,
}

/// `hull run ARGS` alone: clap builds only the run subcommand's flags, not every subcommand's
/// (a one-shot run pays for its own argument parse on its result's path). Anything it does
/// not parse (`--help`, a bad flag) goes to the full parser, which says it as usual.
#[derive(Parser)]
#[command(name = "hull run", no_binary_name = true)]
struct RunOnly {
    #[command(flatten)]
    run: run::RunArgs,
    #[command(flatten)]
    verbosity: Verbosity,
}

/// Sets what hull prints from the flags and `HULL_LOG`; a bad `HULL_LOG` ends the process (125).
fn set_verbosity(flags: &Verbosity, v: u8) {
    if let Err(msg) = hull_cli::verbosity::init(flags, v) {
        eprintln!("hull: error: {msg}");
        std::process::exit(125);
    }
}

/// Bad arguments exit 125, as every hull error does (docker's convention: the program's own
/// codes stay its own), not clap's 2; `--help` and `--version` print and exit 0.
fn exit_on_parse_error(e: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => std::process::exit(0),
        _ => std::process::exit(125),
    }
}

fn main() {
    // hull as a microVM guest's init (the initramfs's /init): the kernel starts it as PID 1.
    if std::process::id() == 1 && std::env::args_os().next().is_some_and(|a| a == "/init") {
        hull_vm::guest::main(hull_box::configure_guest_links);
    }
    hull_box::trace::step("main: entered");
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.next_if(|a| a == "run").is_some() {
        // Its temporary workspace is made beside the parse and the runtime's set-up.
        let ahead = hull_box::WorkspaceAhead::start();
        match RunOnly::try_parse_from(argv) {
            Ok(only) => {
                set_verbosity(&only.verbosity, 0);
                hull_box::trace::step("main: arguments parsed (run only)");
                std::process::exit(run::main_ahead(only.run, Some(ahead)));
            }
            // The full parser may exit at once (--help, an error): nothing may be left.
            Err(_) => drop(ahead),
        }
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => exit_on_parse_error(&e),
    };
    set_verbosity(&cli.verbosity, cli.v);
    hull_box::trace::step("main: arguments parsed");
    // Reports end quietly on a closed stdout (`hull doctor | head`); the servers, the keeper
    // and `run` handle EPIPE themselves (they have boxes to end first).
    if matches!(
        cli.command,
        Command::Doctor(_)
            | Command::Bench(_)
            | Command::Import(_)
            | Command::Pull(_)
            | Command::Images(_)
            | Command::Rmi(_)
            | Command::Ps(_)
            | Command::Logs(_)
            | Command::Template(_)
            | Command::Ca(_)
            | Command::Completions { .. }
            | Command::Man
    ) {
        hull_cli::end_quietly_on_closed_stdout();
    }
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
        Command::Create(args) => named::create(&args),
        Command::Exec(args) => named::exec(&args),
        Command::Stop(args) => named::stop(&args),
        Command::Start(args) => named::start(&args),
        Command::Rm(args) => named::rm(&args),
        Command::Ps(args) => named::ps(&args),
        Command::Logs(args) => named::logs(&args),
        Command::Template(args) => named::template_main(&args),
        Command::Ca(args) => ca::main(&args),
        Command::Keeper(args) => named::keeper_main(&args),
        Command::Files(args) => named::files_ns::main(&args),
        Command::Net => hull_cli::net::gateway::main(),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "hull", &mut std::io::stdout());
            0
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("hull: error: write the man page: {e}");
                    125
                }
            }
        }
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run-only parser reads a run's flags as the full one does, and refuses what it does
    /// not know (so the full parser can say it).
    #[test]
    fn the_run_only_parse_agrees_with_the_full_one() {
        let args = [
            "--json", "--memory", "64m", "-e", "A=1", "--", "python3", "-c", "1",
        ];
        let only = RunOnly::try_parse_from(args).unwrap().run;
        let full = match Cli::try_parse_from(["hull", "run"].into_iter().chain(args)) {
            Ok(Cli {
                command: Command::Run(r),
                ..
            }) => r,
            _ => panic!("the full parser refused a run"),
        };
        assert_eq!(format!("{only:?}"), format!("{full:?}"));
        assert!(RunOnly::try_parse_from(["--help"]).is_err());
        assert!(RunOnly::try_parse_from(["--bogus"]).is_err());
    }
}
