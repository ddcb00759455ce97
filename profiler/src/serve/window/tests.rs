//! Window tests.
use super::*;
