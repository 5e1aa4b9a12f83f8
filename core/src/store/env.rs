//! torchrun's launch variables, parsed strictly.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};

use thiserror::Error;

/// A launch variable that is missing or malformed. Each names the variable, the value and
/// what would be valid.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvError {
    /// The variable is not set.
    #[error("{var} is not set ({expected})")]
    Missing {
        /// The variable.
        var: &'static str,
        /// What a valid value is.
        expected: &'static str,
    },
    /// The variable is set to something invalid.
    #[error("{var}={} is invalid: expected {expected}", crate::error::clip(value))]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What a valid value is.
        expected: String,
    },
    /// `MASTER_ADDR:MASTER_PORT` does not resolve to an address.
    #[error("MASTER_ADDR={host:?} with MASTER_PORT={port} does not resolve: {reason}")]
    Resolve {
        /// `MASTER_ADDR`.
        host: String,
        /// `MASTER_PORT`.
        port: u16,
        /// The resolver's answer.
        reason: String,
    },
}

/// One process's place in a job launched by torchrun (or anything that sets its variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `RANK`: global rank, `0 <= rank < world_size`.
    pub rank: usize,
    /// `WORLD_SIZE`: number of processes, at least 1.
    pub world_size: usize,
    /// `LOCAL_RANK`: rank on this node (the device index), `< world_size`.
    pub local_rank: usize,
    /// `MASTER_ADDR`: host of rank 0's store (a name or an IP address).
    pub master_addr: String,
    /// `MASTER_PORT`: port of rank 0's store, 1..=65535.
    pub master_port: u16,
}

const NUMBER: &str = "a decimal number made of the digits 0-9 only, without leading zeros";

impl LaunchEnv {
    /// Parses the process environment.
    pub fn from_env() -> Result<LaunchEnv, EnvError> {
        LaunchEnv::from_lookup(|var| {
            std::env::var_os(var).map(|v| {
                v.into_string()
                    .unwrap_or_else(|raw| format!("<not UTF-8: {}>", raw.to_string_lossy()))
            })
        })
    }

    /// Parses variables from a map (tests, or a launcher that passes them explicitly).
    pub fn from_map(vars: &HashMap<String, String>) -> Result<LaunchEnv, EnvError> {
        LaunchEnv::from_lookup(|var| vars.get(var).cloned())
    }

    /// Parses variables read through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<LaunchEnv, EnvError> {
        let get = |var: &'static str, expected: &'static str| {
            lookup(var).ok_or(EnvError::Missing { var, expected })
        };
        let world_size = parse_number(
            "WORLD_SIZE",
            &get("WORLD_SIZE", "the number of processes, at least 1")?,
        )?;
        if world_size == 0 {
            return Err(EnvError::Invalid {
                var: "WORLD_SIZE",
                value: "0".to_owned(),
                expected: "at least 1".to_owned(),
            });
        }
        let rank = parse_number("RANK", &get("RANK", "the global rank, below WORLD_SIZE")?)?;
        if rank >= world_size {
            return Err(EnvError::Invalid {
                var: "RANK",
                value: rank.to_string(),
                expected: format!("0..{} (below WORLD_SIZE={world_size})", world_size - 1),
            });
        }
        let local_rank = parse_number(
            "LOCAL_RANK",
            &get("LOCAL_RANK", "the rank on this node, below WORLD_SIZE")?,
        )?;
        if local_rank >= world_size {
            return Err(EnvError::Invalid {
                var: "LOCAL_RANK",
                value: local_rank.to_string(),
                expected: format!("0..{} (below WORLD_SIZE={world_size})", world_size - 1),
            });
        }
        let master_addr = get("MASTER_ADDR", "the host name or IP address of rank 0")?;
        if master_addr.is_empty()
            || master_addr
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(EnvError::Invalid {
                var: "MASTER_ADDR",
                value: master_addr,
                expected: "a host name or IP address without whitespace".to_owned(),
            });
        }
        let port_text = get("MASTER_PORT", "the store port of rank 0, 1..=65535")?;
        let master_port = parse_number("MASTER_PORT", &port_text)?;
        let master_port = u16::try_from(master_port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| EnvError::Invalid {
                var: "MASTER_PORT",
                value: port_text.clone(),
                expected: "a port number in 1..=65535".to_owned(),
            })?;
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            master_addr,
            master_port,
        })
    }

    /// The store's address: `MASTER_ADDR:MASTER_PORT`, resolved (first address wins).
    pub fn master_socket_addr(&self) -> Result<SocketAddr, EnvError> {
        let host = self
            .master_addr
            .trim_start_matches('[')
            .trim_end_matches(']');
        let resolve_error = |reason: String| EnvError::Resolve {
            host: self.master_addr.clone(),
            port: self.master_port,
            reason,
        };
        (host, self.master_port)
            .to_socket_addrs()
            .map_err(|e| resolve_error(e.to_string()))?
            .next()
            .ok_or_else(|| resolve_error("no address".to_owned()))
    }
}

fn parse_number(var: &'static str, text: &str) -> Result<usize, EnvError> {
    let invalid = |expected: String| EnvError::Invalid {
        var,
        value: text.to_owned(),
        expected,
    };
    // `RANK=00` or `MASTER_PORT=080` is a typo or an octal habit, not a number to guess
    // at: rejected, as `MULTI_STREAM_MEMORY_REUSE=02` is.
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || leading_zero {
        return Err(invalid(NUMBER.to_owned()));
    }
    text.parse::<usize>()
        .map_err(|_| invalid(format!("{NUMBER}, at most {}", usize::MAX)))
}
