/* Two ranks in one process through the C API: an AllReduce checked element by element. */
#include <collie/collie.h>
#include <stdio.h>

int main(void) {
  collieComm_t comms[2];
  if (collieCommInitAll(comms, 2, NULL) != collieSuccess) return 1;
  float data[2][5];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 5; ++i) data[r][i] = (float)(r + i);
  collieGroupStart();
  for (int r = 0; r < 2; ++r) collieAllReduce(data[r], data[r], 5, collieFloat32, collieSum, comms[r], NULL);
  if (collieGroupEnd() != collieSuccess) return 2;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 5; ++i)
      if (data[r][i] != (float)(1 + 2 * i)) return 3;
  for (int r = 0; r < 2; ++r) collieCommDestroy(comms[r]);
  printf("consumer_c ok\n");
  return 0;
}
