/* options.c: run-time options, read once from STRATA_* environment variables
 * at initialisation (before any heap exists), never changed afterwards. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct options strata_options;

static bool read_flag(const char *name, bool fallback)
{
    const char *value = getenv(name);
    if (value == NULL || *value == '\0')
        return fallback;
    if (strcmp(value, "1") == 0 || strcmp(value, "yes") == 0 || strcmp(value, "on") == 0)
        return true;
    if (strcmp(value, "0") == 0 || strcmp(value, "no") == 0 || strcmp(value, "off") == 0)
        return false;
    char message[96];
    size_t length = strlen(name);
    if (length > 64)
        length = 64;
    memcpy(message, name, length);
    memcpy(message + length, " is not 0/1, default used", 26);
    report_warning(message, NULL);
    return fallback;
}

void options_init(void)
{
    strata_options.check = read_flag("STRATA_CHECK", false);
}
