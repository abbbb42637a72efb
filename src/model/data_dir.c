/* Where the shipped data (models/, cases/) is: $RESHARD_DATA_DIR, else found
 * relative to the file that holds this library's code (dladdr): an
 * installed library or program finds <prefix>/share/reshard beside its
 * lib/ or bin/, a build tree finds the reshard-data link CMake made in the
 * build directory (the program may sit a few directories below it). No path
 * is compiled in. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reshard/reshard_model.h"

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *reshard_data_dir(void)
{
    static _Thread_local char dir[4096];
    const char *env = getenv("RESHARD_DATA_DIR");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
        return dir;
    }
    Dl_info info;
    if (!dladdr((void *)(size_t)&reshard_data_dir, &info) || !info.dli_fname)
        return NULL;
    char self[4096];
    if (!realpath(info.dli_fname, self))
        return NULL;
    char *slash = strrchr(self, '/');
    if (!slash)
        return NULL;
    *slash = '\0'; /* the directory of the library (or of a program linking it statically) */
    static const char *const tries[] = {"/../share/reshard", "/reshard-data", "/../reshard-data",
                                        "/../../reshard-data"};
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
        char cand[4200];
        snprintf(cand, sizeof cand, "%s%s", self, tries[i]);
        if (is_dir(cand) && realpath(cand, dir))
            return dir;
    }
    return NULL;
}
