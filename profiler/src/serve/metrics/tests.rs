//! Exporter tests.
use super::*;
