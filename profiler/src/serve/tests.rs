//! Serve option and metric tests.
use super::*;
