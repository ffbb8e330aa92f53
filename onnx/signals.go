package onnx

/*
#include <signal.h>
#include <string.h>

#define TOWERRL_NSIG 65

// towerrl_signals is the set of signal dispositions saved by towerrl_save_signals.
typedef struct {
	struct sigaction act[TOWERRL_NSIG];
	int have[TOWERRL_NSIG];
} towerrl_signals;

static void towerrl_save_signals(towerrl_signals *s) {
	for (int sig = 1; sig < TOWERRL_NSIG; sig++)
		s->have[sig] = sigaction(sig, NULL, &s->act[sig]) == 0;
}

// towerrl_restore_signals puts back every saved disposition that has changed since, and
// returns how many it put back (or -1 when one could not be).
static int towerrl_restore_signals(const towerrl_signals *s) {
	int n = 0;
	for (int sig = 1; sig < TOWERRL_NSIG; sig++) {
		struct sigaction cur;
		if (!s->have[sig] || sigaction(sig, NULL, &cur) != 0)
			continue;
		if (cur.sa_sigaction == s->act[sig].sa_sigaction && cur.sa_flags == s->act[sig].sa_flags)
			continue;
		if (sigaction(sig, &s->act[sig], NULL) != 0)
			return -1;
		n++;
	}
	return n;
}

// towerrl_test_steal_sigusr1 installs a C handler for SIGUSR1, as a library that takes over
// signals would (tests only). Unlike the CUDA provider's, it runs on the alternate signal
// stack, so a signal that reaches it on a goroutine's small stack is still safe.
static void towerrl_test_handler(int sig) { (void)sig; }
static void towerrl_test_steal_sigusr1(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = towerrl_test_handler;
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR1, &sa, NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// signalsMu serialises the save-and-restore windows: one set of saved dispositions at a time.
var signalsMu sync.Mutex

// keepGoSignals runs f, then restores every signal disposition f changed. ONNX Runtime's CUDA
// provider installs its own handlers without SA_ONSTACK when it loads and initialises
// (onnxruntime_go issue 140), which replaces Go's: Ctrl-C then crashes the process instead of
// reaching signal.Notify. It returns f's error, joined with one when a handler could not be put
// back, and how many handlers it restored.
func keepGoSignals(f func() error) (restored int, err error) {
	signalsMu.Lock()
	defer signalsMu.Unlock()
	var saved C.towerrl_signals
	C.towerrl_save_signals(&saved)
	err = f()
	n := int(C.towerrl_restore_signals(&saved))
	if n < 0 {
		return 0, errors.Join(err, fmt.Errorf("%w: could not restore Go's signal handlers after loading the CUDA provider", ErrProvider))
	}
	return n, err
}

// stealSIGUSR1 replaces Go's SIGUSR1 handler with a C one (tests only).
func stealSIGUSR1() { C.towerrl_test_steal_sigusr1() }
