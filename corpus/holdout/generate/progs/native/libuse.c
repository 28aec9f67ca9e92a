/* Linked against libhshared.so; the driver removes the library before running it. */
#include <stdio.h>
int hshared_answer(void);
int main(void) { printf("answer %d\n", hshared_answer()); return 0; }
