/* The plugin's arguments (plugstack.conf), parsed into one struct (config.c). */
#ifndef GPUALERT_CONFIG_H
#define GPUALERT_CONFIG_H

#include "gpualert.h"

#include <limits.h>
#include <stddef.h>

struct plugin_config {
    char spool[PATH_MAX];      /* spool= : "" means no tapping */
    int default_on;            /* default=on|off */
    size_t ring_bytes;         /* buffer= : spool bytes held while the spool is slow */
    size_t batch_log_max;      /* batch_log_max= : head of the batch step's log kept (0: all) */
    char local_dir[PATH_MAX];  /* local= : node-local dir for records the spool did not take */
};

/* Fills cfg from the defaults and then av; a malformed argument is logged and ignored. */
void config_parse(struct plugin_config *cfg, int ac, char **av);
/* Only says what is wrong with av (the contexts that use no argument). */
void config_check(int ac, char **av);

#endif
