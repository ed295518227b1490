//! The `hoard` binary's own cases, one test binary for all of them: each
//! module drives the real binary as a child process (or reads the
//! workspace it is built from). One binary instead of eleven keeps the
//! test build's links and its disk use down.

mod common;

mod build_script;
mod cli;
mod cluster;
mod crash;
mod dist;
mod layers;
mod privileges;
mod purge;
mod reload;
mod sign;
mod upgrade;
