/* A stand-in for an old ONNX Runtime library: it exports OrtGetApiBase, reports version 1.10.0,
   and serves no C API newer than 10. Built by the tests with the system C compiler. */
#include <stddef.h>
#include <stdint.h>

static const void *get_api(uint32_t version) {
	static int api;
	return version <= 10 ? (const void *)&api : NULL;
}
static const char *get_version(void) { return "1.10.0"; }

typedef struct {
	const void *(*GetApi)(uint32_t);
	const char *(*GetVersionString)(void);
} base_t;
static const base_t base = {get_api, get_version};

const base_t *OrtGetApiBase(void) { return &base; }
