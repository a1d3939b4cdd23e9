//! `tapdeck serve`: the recorder as a service that runs for weeks with nobody watching.
//!
//! It records exactly as `tapdeck record -i` does (the same pipeline and files) and adds
//! what an operator needs around it: a config file with reload ([`config`]), Prometheus
//! metrics and a health check over HTTP ([`metrics`], [`health`], [`http`]), systemd
//! readiness and watchdog notifications ([`notify`]), and the client behind
//! `tapdeck status` ([`status`]).
//!
//! Dependencies point one way: [`state`] (what every thread shares) uses the settings,
//! tokens ([`auth`], [`session`]), [`tls`] and [`listen`]; [`health`], [`metrics`] and
//! [`web`] read the state; [`http`] sits on top of them all. See the crate's README.

pub mod auth;
pub mod backoff;
pub mod config;
pub mod error;
pub mod health;
pub mod history;
pub mod http;
pub mod listen;
pub mod logsafe;
pub mod metrics;
pub mod notify;
pub mod overview;
pub mod process;
pub mod query;
pub mod reload;
pub mod session;
pub mod state;
pub mod status;
pub mod tls;
pub mod web;
