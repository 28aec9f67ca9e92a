/* Linked against the stub library, which the build removes before running it. */
#include <stdio.h>
int stub_entry(int);
int main(void) { printf("%d\n", stub_entry(41)); return 0; }
