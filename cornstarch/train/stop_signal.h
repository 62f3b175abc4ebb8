// Preemption: SIGTERM or SIGUSR1 (Slurm sends one before the time limit when asked with --signal) asks the run to
// stop cleanly: the trainer finishes the current step, every rank agrees on it (one small all-reduce per step,
// since ranks see the signal at different moments), the state is saved and the process exits 0. A second signal
// ends the process at once (exit 128 + signal). Process-wide: signal handlers are.
#pragma once

namespace cornstarch {

// Installs the handlers (idempotent).
void InstallStopSignals();

// The first stop signal received (SIGTERM or SIGUSR1), or 0 when none has arrived.
int StopSignal();

// "SIGTERM", "SIGUSR1".
const char* SignalName(int signal);

}  // namespace cornstarch
