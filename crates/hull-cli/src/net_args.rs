//! The network flags `hull run` and `hull create` share (`--network`, `--allow-host`,
//! `--allow-cidr`, `--deny-cidr`, `--publish`, `--max-tcp-connections`, `--secret`), and the
//! network and secrets they ask for, refused naming the flags as they were written.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use hull_api::network::{NetworkParts, Part};
use hull_api::{Network, NetworkMode, Secret};

/// `--network`, with what each value means for `--help`.
fn network_parser() -> impl TypedValueParser<Value = NetworkMode> {
    PossibleValuesParser::new([
        PossibleValue::new("none").help("A private network namespace with loopback only (the default)."),
        PossibleValue::new("host").help("The host's network: an explicit relaxation of the box."),
        PossibleValue::new("deny-all").help("The gateway, reaching nothing (--publish still works)."),
        PossibleValue::new("allow-all").help("The gateway to the public internet only (private, loopback, metadata and this host's addresses denied)."),
        PossibleValue::new("custom").help("The gateway to --allow-host names and --allow-cidr blocks only."),
    ])
    .map(|s| NetworkMode::parse(&s).expect("every listed name is a network"))
}

#[derive(Args, Debug, Clone, Default, PartialEq)]
pub struct NetworkArgs {
    /// Network: none (loopback only; the default), host, or a gateway mode (deny-all,
    /// allow-all, custom): the box's own TAP, served by a confined gateway process that answers
    /// DNS and judges every name and connection by the policy (docs/network.md).
    #[arg(long, value_name = "MODE", value_parser = network_parser())]
    pub network: Option<NetworkMode>,
    /// A host the box may reach: an exact name, or `*.example.com` for every name below it
    /// (not the apex). Implies --network custom. Repeatable.
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// An address block the box may reach (`203.0.113.0/24`, an address alone), even in an
    /// always-denied class. Implies --network custom. Repeatable.
    #[arg(long, value_name = "CIDR")]
    pub allow_cidr: Vec<String>,
    /// An address block the box may never reach; wins over every allowance. Repeatable.
    #[arg(long, value_name = "CIDR")]
    pub deny_cidr: Vec<String>,
    /// A box port to publish on this host's 127.0.0.1 (a free port is chosen). Gateway modes
    /// only. Repeatable.
    #[arg(long, value_name = "PORT")]
    pub publish: Vec<u64>,
    /// The most TCP connections the box may have open through the gateway (default 1024).
    #[arg(long, value_name = "N")]
    pub max_tcp_connections: Option<u64>,
    /// A secret the gateway puts into requests to HOSTs: NAME=env:VAR@HOST[,HOST...][:HEADER,...]
    /// (NAME@HOST... reads $NAME). The box sees a placeholder in $NAME; the value is read
    /// from this process's environment, never given on the command line. Headers default to
    /// authorization. Gateway modes only. Repeatable.
    #[arg(long, value_name = "NAME=env:VAR@HOST")]
    pub secret: Vec<String>,
}

impl NetworkArgs {
    /// The network and secrets the flags ask for; a refusal names the flags (`--network none
    /// with --allow-host: ...`, `--allow-host: ...`), and a secret whose variable is not set.
    pub fn request(&self) -> Result<(Network, Vec<Secret>), String> {
        let secrets = self
            .secret
            .iter()
            .map(|s| Secret::parse_flag(s).map_err(|e| format!("--secret: {e}")))
            .collect::<Result<Vec<_>, String>>()?;
        let network = NetworkParts {
            mode: self.network,
            allow_hosts: self.allow_host.clone(),
            allow_cidrs: self.allow_cidr.clone(),
            deny_cidrs: self.deny_cidr.clone(),
            ports: self.publish.clone(),
            max_tcp_connections: self.max_tcp_connections,
        }
        .build(!secrets.is_empty())
        .map_err(|e| e.spelled(Part::flag))?;
        for s in &secrets {
            s.resolve().map_err(|e| format!("--secret: {e}"))?;
        }
        Ok((network, secrets))
    }
}
