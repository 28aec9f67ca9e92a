/*
 * The plugin's arguments (plugstack.conf) into one struct plugin_config. Unknown or malformed
 * ones are logged and ignored: a typo in plugstack.conf must not stop jobs.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

/* N[KMG]; 0 is allowed (batch_log_max=0: keep all). Returns -1 when malformed. */
static long long parse_size(const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    return *end ? -1 : v;
}

void config_parse(struct plugin_config *cfg, int ac, char **av)
{
    *cfg = (struct plugin_config){.ring_bytes = 32u << 20, .batch_log_max = 64u << 20,
                                  .local_dir = "/run/gpualert"};
    for (int i = 0; i < ac; i++) {
        long long v;
        if (!strncmp(av[i], "spool=", 6)) {
            if (av[i][6] != '/' || strlen(av[i] + 6) >= sizeof(cfg->spool) - 64)
                slurm_error("gpualert: plugin argument %s: an absolute path is needed; "
                            "tapping disabled", av[i]);
            else
                snprintf(cfg->spool, sizeof(cfg->spool), "%s", av[i] + 6);
        } else if (!strcmp(av[i], "default=on")) {
            cfg->default_on = 1;
        } else if (!strcmp(av[i], "default=off")) {
            cfg->default_on = 0;
        } else if (!strncmp(av[i], "local=", 6)) {
            if (av[i][6] != '/' || strlen(av[i] + 6) >= sizeof(cfg->local_dir) - 64)
                slurm_error("gpualert: plugin argument %s: an absolute path is needed; keeping "
                            "%s", av[i], cfg->local_dir);
            else
                snprintf(cfg->local_dir, sizeof(cfg->local_dir), "%s", av[i] + 6);
        } else if (!strncmp(av[i], "buffer=", 7)) {
            v = parse_size(av[i] + 7);
            if (v < (64 << 10) || v > (1LL << 30))
                slurm_error("gpualert: plugin argument %s: a size from 64K to 1G is needed; "
                            "keeping %zu bytes", av[i], cfg->ring_bytes);
            else
                cfg->ring_bytes = (size_t)v;
        } else if (!strncmp(av[i], "batch_log_max=", 14)) {
            v = parse_size(av[i] + 14);
            if (v < 0 || (v > 0 && v < (1 << 20)))
                slurm_error("gpualert: plugin argument %s: 0 (no cap) or a size of at least "
                            "1M is needed; keeping %zu", av[i], cfg->batch_log_max);
            else
                cfg->batch_log_max = (size_t)v;
        } else {
            slurm_error("gpualert: unknown plugin argument '%s' (accepted: spool=/path, "
                        "default=on|off, local=/path, buffer=SIZE, batch_log_max=SIZE); ignored",
                        av[i]);
        }
    }
}

void config_check(int ac, char **av)
{
    struct plugin_config unused;
    config_parse(&unused, ac, av);
}
