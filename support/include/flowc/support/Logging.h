// Where flowc's library warnings go. The components log through spdlog's
// default logger, whose stock sink is stdout: the data of the process that
// hosts them (`flowc run --json`'s answer, a notebook cell's output).
#pragma once

namespace flowc {

/// Makes spdlog's default logger print warnings and errors to stderr as
/// "NAME: warning: ..." (info and debug lines are dropped). With
/// `keepHostLogger`, a default logger the host process set itself (any
/// but spdlog's stock, unnamed one) is left as it is: a library must not
/// take over its host's logging. Once this logger is set, such calls
/// return at once (it is named).
void logWarningsToStderr(const char *name, bool keepHostLogger = false);

} // namespace flowc
