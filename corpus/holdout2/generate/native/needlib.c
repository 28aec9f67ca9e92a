/* Linked against libfasttok.so.1, which the driver removes before running it. */
#include <stdio.h>
int fasttok_count(const char *s);
int main(void) { printf("%d\n", fasttok_count("hello world")); return 0; }
